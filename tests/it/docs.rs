//! The manual pages and the shell completions, as a user meets them: the
//! pages through `man -l` (no warning, every extra section), the bash
//! completion through bash's own completion machinery.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(60);

fn oo(sb: &Sandbox, args: &[&str]) -> Out {
    let mut c = sb.program(BIN);
    c.args(args);
    finish(c, LIMIT)
}

/// What bash completes for the words of `line` (the last one being
/// completed), with the script `onlyone completions bash` prints.
fn bash_completes(script: &std::path::Path, line: &[&str]) -> Vec<String> {
    let words: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         _onlyone onlyone '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        words.join(" "),
        line.len() - 1,
        line.join(" "),
        line[line.len() - 1],
        line[line.len().saturating_sub(2)],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &prog])
        .output()
        .expect("run bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_commands_and_their_options() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let out = oo(&sb, &["completions", "bash"]);
    out.expect(0);
    let script = sb.path("onlyone.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let got = bash_completes(&script, &["onlyone", "r"]);
    for want in ["run", "release", "reap"] {
        assert!(got.iter().any(|g| g == want), "`onlyone r` gave {got:?}");
    }
    let got = bash_completes(&script, &["onlyone", "run", "--ki"]);
    assert_eq!(got, ["--kill-after"], "`onlyone run --ki`");
    let got = bash_completes(&script, &["onlyone", "--sto"]);
    assert_eq!(got, ["--store"], "`onlyone --sto`");
    let got = bash_completes(&script, &["onlyone", "--sta"]);
    assert_eq!(got, ["--state-dir"], "`onlyone --sta`");
}

/// The hidden commands (`keeper`, `lease-watchdog`) are onlyone's own:
/// no shell offers them.
#[test]
fn completions_leave_out_the_internal_commands() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let out = oo(&sb, &["completions", "bash"]);
    out.expect(0);
    let script = sb.path("onlyone.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    for word in ["", "k", "l"] {
        let got = bash_completes(&script, &["onlyone", word]);
        assert!(
            !got.iter().any(|g| g == "keeper" || g == "lease-watchdog"),
            "`onlyone {word}` gave {got:?}"
        );
    }
    let got = bash_completes(&script, &["onlyone", ""]);
    for want in ["run", "acquire", "reap", "status"] {
        assert!(got.iter().any(|g| g == want), "`onlyone ` gave {got:?}");
    }
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = oo(&sb, &["completions", shell]);
        out.expect(0);
        for hidden in ["keeper", "lease-watchdog", "lease_watchdog"] {
            assert!(
                !out.stdout.contains(hidden),
                "{shell} offers the internal `{hidden}`"
            );
        }
    }
}

#[test]
fn zsh_and_fish_scripts_name_every_command() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    for shell in ["zsh", "fish"] {
        let out = oo(&sb, &["completions", shell]);
        out.expect(0);
        for cmd in [
            "run", "acquire", "precheck", "status", "stop", "history", "metrics",
        ] {
            assert!(out.stdout.contains(cmd), "{shell} lacks `{cmd}`");
        }
    }
    if have("zsh") {
        let script = sb.path("_onlyone");
        std::fs::write(&script, oo(&sb, &["completions", "zsh"]).stdout).unwrap();
        let ok = Command::new("zsh").arg("-n").arg(&script).status().unwrap();
        assert!(ok.success(), "zsh -n rejects the script");
    }
    oo(&sb, &["completions", "tcsh"]).expect(125).says("tcsh");
}

/// The commands `onlyone --help` lists, but for its own tools
/// (`completions`, `manpages`, `help`).
fn lock_commands(sb: &Sandbox) -> Vec<String> {
    let help = oo(sb, &["--help"]);
    help.expect(0);
    let (_, listed) = help
        .stdout
        .split_once("Commands:\n")
        .expect("a command list");
    let listed = listed.split("\n\n").next().unwrap_or_default();
    let names: Vec<String> = listed
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| !["completions", "manpages", "help"].contains(n))
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// Every command on a lock is in the README's list of commands, and the
/// shells complete it: a new command is flagged here until the lists name
/// it.
#[test]
fn every_command_is_in_the_readme_list_and_completed() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let (_, list) = readme
        .split_once("## Commands\n")
        .expect("README's ## Commands");
    let list = list
        .split_once("```text\n")
        .and_then(|(_, b)| b.split_once("\n```"))
        .expect("a ```text block under ## Commands")
        .0;
    let scripts: Vec<(&str, String)> = ["bash", "zsh", "fish"]
        .into_iter()
        .map(|shell| (shell, oo(&sb, &["completions", shell]).stdout))
        .collect();
    for cmd in lock_commands(&sb) {
        assert!(
            list.lines()
                .any(|l| l.starts_with("onlyone ") && l.split_whitespace().any(|w| w == cmd)),
            "README.md's ## Commands does not list `{cmd}`"
        );
        for (shell, script) in &scripts {
            assert!(script.contains(&cmd), "{shell}'s completion lacks `{cmd}`");
        }
    }
}

#[test]
fn manual_pages_render_without_warnings_with_every_section() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let dir = sb.path("man");
    oo(&sb, &["manpages", &dir.display().to_string()]).expect(0);
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for cmd in [
        "run", "acquire", "release", "precheck", "status", "stop", "reap",
    ] {
        assert!(pages.contains(&format!("onlyone-{cmd}.1")), "{pages:?}");
    }
    assert!(
        !pages
            .iter()
            .any(|p| p.contains("keeper") || p.contains("watchdog"))
    );
    if !have("man") {
        eprintln!("skipped the rendering: no `man` here (.ci/run installs man-db)");
        return;
    }
    for page in &pages {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.join(page))
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "")
            .output()
            .unwrap();
        assert!(out.status.success(), "{page}: {out:?}");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(warnings.is_empty(), "{page}: {warnings}");
        let text = String::from_utf8_lossy(&out.stdout);
        if page == "onlyone.1" {
            for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES"] {
                assert!(text.contains(section), "onlyone.1 lacks {section}");
            }
            for var in [
                "ONLYONE_DIR",
                "ONLYONE_STORE",
                "ONLYONE_LOCK",
                "ONLYONE_TOKEN",
                "ONLYONE_FENCE",
            ] {
                assert!(text.contains(var), "onlyone.1 lacks {var}");
            }
        }
        if page == "onlyone-run.1" {
            assert!(
                text.contains("--kill-after") && text.contains("--lease"),
                "{text}"
            );
        }
    }
}

/// The example units (packaging/systemd) pass `systemd-analyze verify`,
/// with the binary under test in place of /usr/bin/onlyone (verify checks
/// that the programs exist). A unit with an error fails it, so the check
/// is real.
#[test]
fn the_example_systemd_units_verify() {
    if !have("systemd-analyze") {
        eprintln!("skipped: no systemd-analyze here (.ci/run installs systemd)");
        return;
    }
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/systemd");
    let mut units = Vec::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let text = std::fs::read_to_string(e.path()).unwrap();
        let is_service = e.path().extension().is_some_and(|x| x == "service");
        assert!(
            !is_service || text.contains("/usr/bin/onlyone"),
            "{:?}",
            e.path()
        );
        let to = sb.path(&e.file_name().into_string().unwrap());
        std::fs::write(&to, text.replace("/usr/bin/onlyone", BIN)).unwrap();
        units.push(to);
    }
    assert!(units.len() >= 3, "{units:?}");
    let verify = |units: &[std::path::PathBuf]| {
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(units)
            .output()
            .unwrap()
    };
    let out = verify(&units);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    // The same check fails a unit with a mistake in it.
    let bad = sb.path("broken.service");
    std::fs::write(
        &bad,
        "[Service]\nExecStart=onlyone-relative run x -- true\n",
    )
    .unwrap();
    assert!(!verify(&[bad]).status.success());
}

/// The invariants' names in PROTOCOL.md are the names of the model's checks
/// (model/check.sh), appear in the model itself, and name a Rust test: a
/// rule renamed or dropped in one place and not the others fails here.
#[test]
fn every_invariant_has_its_model_check_and_its_test_under_one_name() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let protocol = read("PROTOCOL.md");
    // The name column of PROTOCOL.md's tables.
    let mut names: Vec<&str> = protocol
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split('|').nth(1))
        .map(|c| c.trim().trim_matches('`'))
        .filter(|c| c.starts_with("invariant_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    let numbers: Vec<u32> = names
        .iter()
        .filter_map(|n| n["invariant_".len()..].split('_').next()?.parse().ok())
        .collect();
    for n in 1..=9 {
        assert!(numbers.contains(&n), "PROTOCOL.md names no invariant {n}");
    }
    let checks = read("model/check.sh");
    let model: String = [
        "model/protocol.pml",
        "model/lock.pml",
        "model/run.pml",
        "model/lease.pml",
        "model/queue.pml",
        "model/slots.pml",
    ]
    .iter()
    .map(|p| read(p))
    .collect();
    let mut tests = String::new();
    for entry in std::fs::read_dir(root.join("tests/it")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            tests.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    for name in &names {
        assert!(
            checks.contains(name),
            "model/check.sh has no check named {name}"
        );
        assert!(model.contains(name), "the model does not name {name}");
        assert!(
            tests.contains(&format!("fn {name}()")),
            "no Rust test is named {name}"
        );
    }
    // Every mutant in check.sh is expected to fail, every design to hold.
    for line in checks.lines().filter(|l| l.starts_with("invariant_")) {
        let name = line.split('|').next().unwrap().trim();
        let expect = line.rsplit('|').next().unwrap().trim();
        let base = name.split('.').next().unwrap();
        if name.contains('.') && names.contains(&base) {
            assert_eq!(
                expect, "fails",
                "the mutant {name} must be expected to fail"
            );
        } else if !name.contains('.') {
            assert_eq!(
                expect, "holds",
                "the design check {name} must be expected to hold"
            );
        }
    }
}

/// A table's rows (code, meaning) and the paragraph after it, each with
/// its whitespace made single spaces.
#[derive(Debug, PartialEq, Eq)]
struct ExitTable {
    rows: Vec<(String, String)>,
    after: String,
}

fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The table as `onlyone --help` prints it: `Exit status:`, then a row per
/// code (two spaces, the code, two spaces or more, the meaning; the
/// meaning's further lines indented under it, or not if clap wrapped them
/// again), a blank line and the paragraph after it.
fn exit_table_of_help(help: &str) -> ExitTable {
    let (_, rest) = help
        .split_once("\nExit status:\n")
        .unwrap_or_else(|| panic!("`onlyone --help` has no exit codes:\n{help}"));
    let (table, rest) = rest
        .split_once("\n\n")
        .expect("a blank line after the table");
    let mut rows: Vec<(String, String)> = Vec::new();
    for line in table.lines() {
        let starts_row = line.starts_with("  ") && !line[2..].starts_with(' ');
        if starts_row {
            let (code, meaning) = line[2..]
                .split_once("  ")
                .unwrap_or_else(|| panic!("a row without a meaning: {line:?}"));
            rows.push((code.to_owned(), meaning.to_owned()));
        } else {
            let last = rows.last_mut().expect("the table starts with a row");
            last.1.push(' ');
            last.1.push_str(line);
        }
    }
    let after = rest.split("\n\n").next().unwrap();
    ExitTable {
        rows: rows.into_iter().map(|(c, m)| (c, words(&m))).collect(),
        after: words(after),
    }
}

/// roff as Markdown: bold is a `code span`, escapes undone.
fn unroff(s: &str) -> String {
    let s = s.strip_prefix("\\&").unwrap_or(s);
    words(
        &s.replace("\\fB", "`")
            .replace("\\fR", "`")
            .replace("\\-", "-")
            .replace("\\e", "\\"),
    )
}

/// The table of onlyone(1)'s EXIT STATUS section: `.TP`, the code in
/// bold, its meaning; `.PP` and the paragraph after it.
fn exit_table_of_man(page: &str) -> ExitTable {
    let (_, rest) = page
        .split_once(".SH \"EXIT STATUS\"\n")
        .expect("onlyone.1 has an EXIT STATUS section");
    let section = rest.split("\n.SH ").next().unwrap();
    let (table, after) = section
        .split_once("\n.PP\n")
        .expect("a paragraph after the table");
    let mut rows = Vec::new();
    for item in table.split(".TP\n").skip(1) {
        let (code, meaning) = item.split_once('\n').expect("a code, then its meaning");
        rows.push((unroff(code).trim_matches('`').to_owned(), unroff(meaning)));
    }
    ExitTable {
        rows,
        after: unroff(after),
    }
}

/// The README's table: its `| code | meaning |` rows, a blank line and the
/// paragraph after it.
fn exit_table_of_readme(readme: &str) -> ExitTable {
    let (_, rest) = readme
        .split_once("\n| code | meaning |\n|---|---|\n")
        .expect("the README has the exit-code table");
    let (table, rest) = rest
        .split_once("\n\n")
        .expect("a paragraph after the table");
    let rows = table
        .lines()
        .map(|l| {
            let cells = l
                .strip_prefix("| ")
                .and_then(|l| l.strip_suffix(" |"))
                .unwrap_or_else(|| panic!("not a row of the table: {l:?}"));
            let (code, meaning) = cells.split_once(" | ").expect("two cells");
            (code.to_owned(), words(meaning))
        })
        .collect();
    ExitTable {
        rows,
        after: words(rest.split("\n\n").next().unwrap()),
    }
}

/// The exit codes are one table (src/cli/exit.rs), and it reads the same
/// in `onlyone --help`, in onlyone(1) and in the README; `-h`, the rest of
/// onlyone(1) and the guides point to it and keep no copy of their own.
#[test]
fn the_exit_codes_are_one_table_in_the_help_the_manual_and_the_readme() {
    let sb = Sandbox::new("ONLYONE_DOCS_MARK");
    let long = oo(&sb, &["--help"]);
    long.expect(0);
    let help = exit_table_of_help(&long.stdout);
    let codes: Vec<&str> = help.rows.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        codes,
        ["0", "75", "124", "125", "126 / 127", "128+N", "other"],
        "{help:#?}"
    );
    assert!(help.after.contains("precheck"), "{help:#?}");

    let dir = sb.path("man");
    oo(&sb, &["manpages", &dir.display().to_string()]).expect(0);
    let page = std::fs::read_to_string(dir.join("onlyone.1")).unwrap();
    assert_eq!(
        exit_table_of_man(&page),
        help,
        "onlyone.1 and --help differ"
    );
    let (before, rest) = page.split_once(".SH \"EXIT STATUS\"").unwrap();
    let after = rest.split_once("\n.SH ").map_or("", |x| x.1);
    for (part, text) in [("before", before), ("after", after)] {
        assert!(
            !text.contains("124") && !text.contains("125"),
            "onlyone.1 names exit codes {part} EXIT STATUS:\n{text}"
        );
    }

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert_eq!(
        exit_table_of_readme(&readme),
        help,
        "README.md's exit codes differ from `onlyone --help` (src/cli/exit.rs is the table)"
    );

    let short = oo(&sb, &["-h"]);
    short.expect(0);
    assert!(
        short.stdout.contains("onlyone --help") && !short.stdout.contains("124"),
        "{}",
        short.stdout
    );
    for (path, text) in documents() {
        let rows = text.lines().filter(|l| l.starts_with("| 125 |")).count();
        let want = usize::from(path == "README.md");
        assert_eq!(rows, want, "{path} has {rows} exit-code table(s)");
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown document's text outside its fenced blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every relative link of the README, HACKING.md, PROTOCOL.md,
/// BENCHMARKS.md and the guides names a file that exists and, with a
/// `#`, a heading of it: a fact moved to another document leaves no link
/// behind that points to where it was.
#[test]
fn every_link_between_the_documents_holds() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<String> = ["README.md", "HACKING.md", "PROTOCOL.md", "BENCHMARKS.md"]
        .map(str::to_owned)
        .to_vec();
    docs.extend(
        documents()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p != "README.md"),
    );
    let mut checked = 0;
    for doc in &docs {
        let text = prose(&std::fs::read_to_string(root.join(doc)).unwrap());
        let base = root.join(doc).parent().unwrap().to_owned();
        for (_, rest) in text.match_indices("](").map(|(i, _)| text.split_at(i + 2)) {
            let target = rest.split(')').next().unwrap();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                root.join(doc)
            } else {
                base.join(file)
            };
            assert!(path.exists(), "{doc}: the link ({target}) names no file");
            if !heading.is_empty() {
                let linked = prose(&std::fs::read_to_string(&path).unwrap());
                let anchors: Vec<String> = linked
                    .lines()
                    .filter_map(|l| {
                        l.trim_start_matches('#')
                            .strip_prefix(' ')
                            .filter(|_| l.starts_with('#'))
                    })
                    .map(anchor)
                    .collect();
                assert!(
                    anchors.iter().any(|a| a == heading),
                    "{doc}: the link ({target}) names no heading of {}: {anchors:?}",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} links found");
}

/// The Debian package ships the README and the guides, and not the
/// benchmarks (a record of how onlyone was measured, not a user's guide).
#[test]
fn the_package_ships_the_guides() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let (_, deb) = manifest
        .split_once("[package.metadata.deb]")
        .expect("Cargo.toml has a [package.metadata.deb] section");
    let deb = deb.split("\n[").next().unwrap();
    assert!(
        deb.contains("[\"README.md\", \"usr/share/doc/onlyone/\""),
        "{deb}"
    );
    assert!(
        deb.contains("[\"doc/*.md\", \"usr/share/doc/onlyone/doc/\""),
        "{deb}"
    );
    assert!(!deb.contains("BENCHMARKS.md"), "{deb}");
    let check = std::fs::read_to_string(root.join("packaging/check-deb.sh")).unwrap();
    for (path, _) in documents() {
        let installed = format!("/usr/share/doc/onlyone/{path}");
        assert!(
            check.contains(&installed),
            "check-deb.sh does not look for {installed}"
        );
    }
}

/// The manual pages and completions the package ships (kept in
/// `packaging/`, so that a plain `cargo deb` builds it) are exactly what
/// the binary writes from its own definitions: a changed option with
/// stale pages fails here (`packaging/regenerate.sh` writes them again).
#[test]
fn the_shipped_pages_and_completions_are_the_binarys() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("manpages")
        .arg(fresh.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".1"))
            .collect();
        n.sort();
        n
    };
    let shipped = root.join("packaging/man");
    assert_eq!(
        names(fresh.path()),
        names(&shipped),
        "run packaging/regenerate.sh"
    );
    for n in names(&shipped) {
        assert!(
            std::fs::read(fresh.path().join(&n)).unwrap()
                == std::fs::read(shipped.join(&n)).unwrap(),
            "packaging/man/{n} is stale: run packaging/regenerate.sh"
        );
    }
    for (shell, file) in [
        ("bash", "onlyone"),
        ("zsh", "_onlyone"),
        ("fish", "onlyone.fish"),
    ] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let kept = std::fs::read(root.join("packaging/completions").join(file)).unwrap();
        assert!(
            out.stdout == kept,
            "packaging/completions/{file} is stale: run packaging/regenerate.sh"
        );
    }
}
