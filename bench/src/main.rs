//! `ferry-bench`: placeholder while the benchmark is written.

fn main() {}
