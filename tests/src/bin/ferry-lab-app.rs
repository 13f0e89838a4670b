//! The apps of the lab tests, run inside a lab host: the rolling upgrade's
//! (`ferry_tests::lab_app`) and, with `"mode": "steady"`, the failover test's
//! (`ferry_tests::lab_steady`) and, with `"mode": "campaign"`, the fault campaign's
//! (`ferry_tests::campaign::app`), and with `"mode": "mdns-forge"` the stranger forging mDNS
//! announcements of the discovery test (`ferry_tests::lab_forge`). Their settings come in
//! `FERRY_LAB_UPGRADE_APP`.

fn main() {
    let Ok(settings) = std::env::var(ferry_tests::lab_app::SETTINGS_VAR) else {
        eprintln!(
            "ferry-lab-app: {} is not set; this app is started by tests/tests/lab_upgrade.rs",
            ferry_tests::lab_app::SETTINGS_VAR
        );
        std::process::exit(2);
    };
    match serde_json::from_str::<serde_json::Value>(&settings) {
        Ok(settings) if settings["mode"] == "steady" => ferry_tests::lab_steady::run(&settings),
        Ok(settings) if settings["mode"] == "campaign" => {
            ferry_tests::campaign::app::run(&settings)
        }
        Ok(settings) if settings["mode"] == "mdns-forge" => ferry_tests::lab_forge::run(&settings),
        Ok(settings) => ferry_tests::lab_app::run(&settings),
        Err(err) => {
            eprintln!("ferry-lab-app: the settings are not JSON: {err}");
            std::process::exit(2);
        }
    }
}
