//! The app of the rolling-upgrade lab test, run inside a lab host: see
//! `ferry_tests::lab_app`. Its settings come in `FERRY_LAB_UPGRADE_APP`.

fn main() {
    let Ok(settings) = std::env::var(ferry_tests::lab_app::SETTINGS_VAR) else {
        eprintln!(
            "ferry-lab-app: {} is not set; this app is started by tests/tests/lab_upgrade.rs",
            ferry_tests::lab_app::SETTINGS_VAR
        );
        std::process::exit(2);
    };
    match serde_json::from_str(&settings) {
        Ok(settings) => ferry_tests::lab_app::run(&settings),
        Err(err) => {
            eprintln!("ferry-lab-app: the settings are not JSON: {err}");
            std::process::exit(2);
        }
    }
}
