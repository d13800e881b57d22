//! `personkit`: the relay server and its CLI (skeleton; the relay issue fills it in).

fn main() -> anyhow::Result<()> {
    Ok(())
}
