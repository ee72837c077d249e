//! Kubernetes' syntax of label keys and values (what a NodeOverlay's requirements and a
//! provider's labels are checked against).

/// Checks a label value: ≤ 63 characters, alphanumerics with `-_.` inside.
pub fn validate_label_value(v: &str) -> Result<(), String> {
    if v.len() > 63 {
        return Err("longer than 63 characters".into());
    }
    if v.is_empty() {
        return Ok(());
    }
    let ok_inner = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let bytes = v.as_bytes();
    let ends = bytes[0].is_ascii_alphanumeric() && bytes[bytes.len() - 1].is_ascii_alphanumeric();
    if ok_inner && ends {
        Ok(())
    } else {
        Err(
            "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
                .into(),
        )
    }
}

/// Checks a label (or taint) key: `[prefix/]name`, prefix a DNS subdomain.
pub fn validate_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if name.is_empty() {
        return Err("empty name".into());
    }
    validate_label_value(name).map_err(|e| format!("name {e}"))?;
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!("prefix {p:?} is not a DNS subdomain"));
        }
    }
    Ok(())
}
