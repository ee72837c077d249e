//! Writes the KWOKNodeClass CRD into a directory (`make crds` writes it into `crds/`):
//! `cargo run -p kwok --example crd -- crds`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "crds".into());
    let (name, yaml) = kwok::nodeclass::rendered()?;
    let path = std::path::Path::new(&dir).join(name);
    std::fs::write(&path, yaml)?;
    println!("{}", path.display());
    Ok(())
}
