//! The command's wording of the library's errors: the library says the
//! kind and the reason; here they are said with the command's flags.

use onlyone::hint::Hint;
use onlyone::place::store::StoreError;
use onlyone::place::store::timing::LeaseTimingError;
use onlyone::text::compact_duration as duration;

/// A store error as the command says it: a store this onlyone was built
/// without names `--store`; every other error is the library's sentence.
pub fn store_error(e: &StoreError) -> String {
    match e {
        StoreError::NotBuilt { engine, feature } => format!(
            "this onlyone was built without the {engine} store (cargo feature `{feature}`), so \
             --store cannot be used; build it with the default features"
        ),
        e => e.to_string(),
    }
}

/// A lease timing that cannot work, as the command says it: the lease is
/// `--lease` and the grace `--kill-after`.
pub fn lease_timing_error(e: &LeaseTimingError) -> String {
    match *e {
        LeaseTimingError::TooShort { lease } => format!(
            "--lease {} is too short: it must be at least 500ms",
            duration(lease)
        ),
        LeaseTimingError::GraceTooLong {
            grace,
            lease,
            renew,
            call,
            margin,
            largest,
        } => format!(
            "--kill-after {} does not fit in --lease {}: a holder must end its command before \
             the lease can run out (renew {} + call timeout {} + grace + margin {} < lease); the \
             largest grace that fits is {}, or lengthen the lease",
            duration(grace),
            duration(lease),
            duration(renew),
            duration(call),
            duration(margin),
            duration(largest)
        ),
        e => e.to_string(),
    }
}

/// A hint of the library's messages as the command says it, with its
/// options: the wording [`main`](super::main) sets for every message.
pub fn hint(h: &Hint<'_>) -> String {
    match *h {
        Hint::LockDirGiven => "from --dir".to_owned(),
        Hint::StateDirGiven => "from --state-dir".to_owned(),
        Hint::OtherStateDir => "--state-dir DIR".to_owned(),
        Hint::AllowSharedFs => {
            "pass --allow-shared-fs (or set ONLYONE_ALLOW_SHARED_FS=1)".to_owned()
        }
        Hint::Force => "use --force".to_owned(),
        Hint::ForcedRelease { path, as_root } => format!(
            "`{}onlyone release --force {}`",
            if as_root { "sudo " } else { "" },
            path.display()
        ),
    }
}

/// `--store`'s help: a store's URL, each engine's as it takes it.
pub fn store_help() -> String {
    let engines: Vec<String> = onlyone::place::store::ENGINES
        .iter()
        .map(|e| format!("{} ({})", e.url, e.about))
        .collect();
    format!(
        "Keep the locks in a store that several hosts share, named by its URL: {}",
        engines.join(", or ")
    )
}
