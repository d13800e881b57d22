//! `scripts/install-cli` (run by `scripts/run`) puts the `personkit` binary where a shell finds it, so the
//! README's `personkit …` lines work after `scripts/run`. Run here with the test build and a temporary HOME.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn install_cli_puts_personkit_on_a_path_the_shell_uses() {
    let home = tempfile::tempdir().unwrap();
    let script = personkit_testkit::workspace_root().join("scripts/install-cli");
    let bin = personkit_testkit::bin();
    let run = |path_var: &str| {
        Command::new(&script)
            .arg(&bin)
            .env("HOME", home.path())
            .env("PATH", path_var)
            .env_remove("PERSONKIT_BIN_DIR")
            .output()
            .expect("run install-cli")
    };
    // Not on PATH yet: it says so and prints the line to add.
    let out = run("/usr/bin:/bin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let dir = home.path().join(".local/bin");
    assert!(
        said.contains("is not on your PATH") && said.contains("export PATH="),
        "{said}"
    );
    // Installed and runnable by name from a shell whose PATH has the folder; a second run is harmless.
    let path_var = format!("{}:/usr/bin:/bin", dir.display());
    let out = run(&path_var);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("on your PATH"));
    let version = Command::new("sh")
        .args(["-c", "personkit --version"])
        .env("PATH", &path_var)
        .output()
        .unwrap();
    assert!(
        version.status.success(),
        "{}",
        String::from_utf8_lossy(&version.stderr)
    );
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("personkit "));
    // A missing build is a clear error.
    let out = Command::new(&script)
        .arg(home.path().join("no-such-binary"))
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not built"));
}
