//! `ferry`: everything lives in the library; see `ferry_gateway::cli`.

fn main() -> std::process::ExitCode {
    ferry_gateway::cli::main()
}
