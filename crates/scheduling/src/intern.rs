//! String interning for label keys and values, and bitsets over instance types.

/// The solver's hash map: foldhash, seeded per map, far faster than SipHash on the short keys
/// the solver hashes (label ids, names, requirements).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use crate::requirements::LabelValue;

/// An interned label value; carries its integer value (if any) for `Gt`/`Lt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Sym {
    pub id: u32,
    /// Whether the value is an integer (then `num`); a flag, not a sentinel value, so
    /// every i64 is a number (same size: it sits in the padding).
    numeric: bool,
    num: i64,
}

impl LabelValue for Sym {
    fn as_int(&self) -> Option<i64> {
        self.numeric.then_some(self.num)
    }
}

/// Interned label key.
pub(crate) type Key = u32;

#[derive(Clone, Default)]
pub(crate) struct Interner {
    map: HashMap<String, u32>,
    names: Vec<String>,
    nums: Vec<Option<i64>>,
}

impl Interner {
    pub(crate) fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.map.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.map.insert(s.to_string(), i);
        self.names.push(s.to_string());
        self.nums.push(s.parse::<i64>().ok());
        i
    }

    pub(crate) fn sym(&mut self, s: &str) -> Sym {
        let id = self.id(s);
        let num = self.nums[id as usize];
        Sym {
            id,
            numeric: num.is_some(),
            num: num.unwrap_or_default(),
        }
    }

    /// The symbol of name `id` (as [`Interner::sym`] gave it).
    pub(crate) fn sym_of(&self, id: u32) -> Sym {
        let num = self.nums.get(id as usize).copied().flatten();
        Sym {
            id,
            numeric: num.is_some(),
            num: num.unwrap_or_default(),
        }
    }

    /// Names interned.
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

/// Fixed-size bitset; up to 128 elements without a heap allocation (a claim's candidate
/// types are built anew on every attempt to add a pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BitSet {
    words: smallvec::SmallVec<[u64; 2]>,
}

impl BitSet {
    pub(crate) fn new(len: usize) -> Self {
        BitSet {
            words: smallvec::smallvec![0; len.div_ceil(64)],
        }
    }

    pub(crate) fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Whether some element is in both.
    pub(crate) fn intersects(&self, other: &BitSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The elements of both, ascending.
    pub(crate) fn iter_and<'a>(&'a self, other: &'a BitSet) -> impl Iterator<Item = usize> + 'a {
        self.words
            .iter()
            .zip(&other.words)
            .enumerate()
            .flat_map(|(wi, (&a, &b))| bits(wi, a & b))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(wi, &w)| bits(wi, w))
    }
}

/// The elements of word `wi` holding `w`, ascending.
fn bits(wi: usize, mut w: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if w == 0 {
            return None;
        }
        let b = w.trailing_zeros() as usize;
        w &= w - 1;
        Some(wi * 64 + b)
    })
}
