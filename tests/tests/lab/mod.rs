//! The lab, for the lab tests: it lives in the test package's library (`ferry_tests::lab`),
//! where the fault campaign (`ferry-campaign`) uses it too.

// Not every lab test uses every helper.
#[allow(unused_imports)]
pub use ferry_tests::lab::*;
