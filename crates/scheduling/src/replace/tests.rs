use super::*;

fn offer(ct: &str, price: f64) -> Offer {
    Offer {
        capacity_type: ct.into(),
        price,
    }
}

fn option(name: &str, offers: Vec<Offer>) -> Choice {
    Choice {
        instance_type: name.into(),
        offers,
    }
}

fn on_demand(types: &[(&str, f64)]) -> Replaced {
    Replaced {
        types: types.iter().map(|(t, p)| ((*t).to_string(), *p)).collect(),
        all_spot: false,
    }
}

fn od_options(options: &[Choice]) -> Options {
    Options {
        options: options.to_vec(),
        allows_spot: false,
        allows_on_demand: true,
        min_values: None,
    }
}

fn names(c: &Chosen) -> Vec<&str> {
    c.options.iter().map(|o| o.instance_type.as_str()).collect()
}

#[test]
fn worst_launch_price_prefers_reserved_then_spot_then_on_demand() {
    assert_eq!(worst_launch_price(&[]), None);
    let offers = [offer(ON_DEMAND, 1.0), offer(SPOT, 0.3), offer(SPOT, 0.4)];
    assert_eq!(worst_launch_price(&offers), Some(0.4));
    assert_eq!(worst_launch_price(&offers[..1]), Some(1.0));
    let with_reserved = [offer(RESERVED, 0.9), offer(SPOT, 0.1)];
    assert_eq!(worst_launch_price(&with_reserved), Some(0.9));
}

#[test]
fn a_replacement_must_be_strictly_cheaper_and_never_like_for_like() {
    let options = [
        option("small", vec![offer(ON_DEMAND, 0.1)]),
        option("medium", vec![offer(ON_DEMAND, 0.2)]),
        option("large", vec![offer(ON_DEMAND, 0.4)]),
    ];
    let large = on_demand(&[("large", 0.4)]);
    let c = choose(&large, &options, false, true, None).expect("cheaper");
    assert_eq!(
        names(&c),
        ["small", "medium"],
        "large itself is not cheaper"
    );
    assert_eq!(c.capacity_types, None);
    let small = on_demand(&[("small", 0.1)]);
    assert_eq!(
        choose(&small, &options, false, true, None),
        Err(NoReplacement::NoCheaperOption)
    );
    // minValues must still hold after the price filter.
    assert_eq!(
        choose(&large, &options, false, true, Some(3)),
        Err(NoReplacement::MinValues { want: 3, got: 2 })
    );
}

#[test]
fn multi_node_options_of_a_candidates_type_must_be_cheaper_than_it() {
    // Two nodes (0.2 + 0.4) could be replaced by a large (0.4 < 0.6), but a large is
    // one of them: only options cheaper than 0.4 remain.
    let options = [
        option("medium", vec![offer(ON_DEMAND, 0.2)]),
        option("large", vec![offer(ON_DEMAND, 0.4)]),
    ];
    let two = on_demand(&[("medium", 0.2), ("large", 0.4)]);
    let c = choose(&two, &options, false, true, None).expect("medium");
    assert_eq!(names(&c), ["medium"]);
}

#[test]
fn spot_rules() {
    let options = [option(
        "small",
        vec![offer(SPOT, 0.03), offer(ON_DEMAND, 0.1)],
    )];
    // On-demand candidate, replacement may be spot or on-demand: priced as spot (worst
    // spot offering) and restricted to spot.
    let c = choose(&on_demand(&[("large", 0.05)]), &options, true, true, None)
        .expect("spot is cheaper");
    assert_eq!(c.capacity_types, Some(vec![SPOT.to_string()]));
    // Spot to spot is not done.
    let spot = Replaced {
        types: vec![("large".into(), 0.2)],
        all_spot: true,
    };
    assert_eq!(
        choose(&spot, &options, true, true, None),
        Err(NoReplacement::SpotToSpot)
    );
    // Nor in a split, when any of the replacements may be spot.
    let both = [
        od_options(&[option("small", vec![offer(ON_DEMAND, 0.01)])]),
        Options {
            allows_spot: true,
            ..od_options(&options)
        },
    ];
    assert_eq!(choose_split(&spot, &both), Err(NoReplacement::SpotToSpot));
    // A spot candidate may become on-demand if that is cheaper.
    let od_only = [option("small", vec![offer(ON_DEMAND, 0.1)])];
    assert!(choose(&spot, &od_only, false, true, None).is_ok());
}

#[test]
fn a_split_keeps_the_summed_worst_price_below_the_candidates() {
    // One large at 1.00 replaced by four nodes: small 0.05, medium 0.12. Each replacement's
    // cheapest worst price is 0.05; the slack 1.00 - 0.20 = 0.80 is shared, 0.20 each: small
    // and medium both qualify, and four mediums (0.48) are still below 1.00.
    let options = [
        option("small", vec![offer(ON_DEMAND, 0.05)]),
        option("medium", vec![offer(ON_DEMAND, 0.12)]),
        option("large", vec![offer(ON_DEMAND, 1.00)]),
    ];
    let large = on_demand(&[("large", 1.00)]);
    let four: Vec<Options> = (0..4).map(|_| od_options(&options)).collect();
    let chosen = choose_split(&large, &four).expect("cheaper");
    assert_eq!(chosen.len(), 4);
    let mut worst = 0.0;
    for c in &chosen {
        assert_eq!(names(c), ["small", "medium"]);
        worst += c
            .options
            .iter()
            .filter_map(|o| worst_launch_price(&o.offers))
            .fold(0.0, f64::max);
    }
    assert!(worst < 1.00, "{worst}");
    // The share narrows: against 0.30, slack 0.10 gives 0.025 each, so only small remains.
    let cheap = on_demand(&[("large", 0.30)]);
    for c in choose_split(&cheap, &four).expect("smalls") {
        assert_eq!(names(&c), ["small"]);
    }
    // Exactly as dear (four smalls at 0.05 for 0.20) is no saving: refused.
    let even = on_demand(&[("large", 0.20)]);
    assert_eq!(
        choose_split(&even, &four),
        Err(NoReplacement::NoCheaperOption)
    );
    // A replacement without any priced option refuses the split.
    let mut one_empty = four.clone();
    one_empty[2].options.clear();
    assert_eq!(
        choose_split(&large, &one_empty),
        Err(NoReplacement::NoCheaperOption)
    );
}

#[test]
fn one_replacement_is_choose() {
    let options = [
        option("small", vec![offer(ON_DEMAND, 0.1)]),
        option("large", vec![offer(ON_DEMAND, 0.4)]),
    ];
    for price in [0.05, 0.1, 0.2, 0.4, 0.5] {
        let r = on_demand(&[("large", price)]);
        let split = choose_split(&r, &[od_options(&options)]).map(|mut v| v.remove(0));
        assert_eq!(split, choose(&r, &options, false, true, None), "{price}");
    }
}
