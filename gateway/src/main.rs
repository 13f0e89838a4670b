//! `ferry`: everything lives in the library; see `ferry_gateway::cli`.

/// glibc's allocator spent about a fifth of the calling gateway's CPU on a read (arena locks
/// and chunk consolidation as tokio moves tasks between worker threads); mimalloc's
/// thread-local free lists do not. See docs/history/performance-log.md, "Reads".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ferry_gateway::cli::main()
}
