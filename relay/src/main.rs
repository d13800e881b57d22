//! `personkit`: the relay server and its CLI. All logic lives in the `personkit_relay` library.

fn main() -> std::process::ExitCode {
    personkit_relay::cli::main()
}
