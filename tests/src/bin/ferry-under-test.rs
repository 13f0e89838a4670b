//! The `ferry` binary, built inside the test package so integration tests always run the
//! current code (cargo rebuilds a package's own binaries for its tests).

fn main() -> std::process::ExitCode {
    ferry_gateway::cli::main()
}
