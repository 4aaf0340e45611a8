//! `pulsed models` (what is known, what is cached, how large) and `pulsed
//! fetch NAME...` (into the model cache, checked byte by byte).

use std::process::ExitCode;

use clap::Args as ClapArgs;
use pulsed::models::fetch::{self, Source};

#[derive(ClapArgs, Debug)]
pub struct ModelsArgs {}

#[derive(ClapArgs, Debug)]
pub struct FetchArgs {
    /// Short names (`pulsed models` lists them).
    #[arg(required = true)]
    names: Vec<String>,
    /// Only check the cached files against their checksums (no network):
    /// exit 0 when every one is whole, 1 otherwise.
    #[arg(long)]
    check: bool,
}

fn megabytes(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

pub fn models(_: ModelsArgs) -> Result<ExitCode, String> {
    let mut out = format!("{:<30} {:<9} {:>8}  {}\n", "NAME", "CACHED", "SIZE", "WHAT");
    for k in fetch::KNOWN {
        let (state, size) = match (k.source, fetch::check(k, false)) {
            (Source::Unavailable(_), _) => ("no", String::new()),
            (Source::Shipped, _) => ("shipped", megabytes(fetch::size_on_disk(&fetch::folder(k)))),
            (_, Ok(())) => ("yes", megabytes(fetch::size_on_disk(&fetch::folder(k)))),
            (_, Err(_)) if fetch::folder(k).is_dir() => ("damaged", String::new()),
            (_, Err(_)) => ("no", String::new()),
        };
        out.push_str(&format!(
            "{:<30} {state:<9} {size:>8}  {}\n",
            k.name, k.what
        ));
    }
    out.push_str(&format!(
        "model cache: {} ({}); wheels kept in {} ({})\n",
        fetch::models_dir().display(),
        megabytes(fetch::size_on_disk(&fetch::models_dir())),
        fetch::wheels_dir().display(),
        megabytes(fetch::size_on_disk(&fetch::wheels_dir())),
    ));
    super::print_all(&out)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: FetchArgs) -> Result<ExitCode, String> {
    let mut whole = true;
    for name in &a.names {
        let k = fetch::known(name).map_err(|e| e.to_string())?;
        if a.check {
            match fetch::check(k, true) {
                Ok(()) => eprintln!("pulsed: {name}: whole ({})", fetch::folder(k).display()),
                Err(d) => {
                    eprintln!("pulsed: {name}: {d}: `pulsed fetch {name}` rebuilds it");
                    whole = false;
                }
            }
            continue;
        }
        if !fetch::fetch_known(k, true).map_err(|e| e.to_string())? {
            eprintln!(
                "pulsed: {name}: already whole in {}",
                fetch::folder(k).display()
            );
        }
    }
    Ok(if whole {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
