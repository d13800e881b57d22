//! `personkit`: the relay server and its CLI. All logic lives in the `personkit_cli` library and the crates below it.

fn main() -> std::process::ExitCode {
    personkit_cli::main()
}
