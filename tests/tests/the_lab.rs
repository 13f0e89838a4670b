//! The tests in the network-namespace lab (`ferry_tests::lab`), grouped under one name that
//! libtest runs late (see `main.rs`). Their files stay beside the other modules' files.

#[path = "lab_campaign.rs"]
mod lab_campaign;
#[path = "lab_discovery.rs"]
mod lab_discovery;
#[path = "lab_doctor.rs"]
mod lab_doctor;
#[path = "lab_failover.rs"]
mod lab_failover;
#[path = "lab_live_sync.rs"]
mod lab_live_sync;
#[path = "lab_routes.rs"]
mod lab_routes;
#[path = "lab_smoke.rs"]
mod lab_smoke;
#[path = "lab_upgrade.rs"]
mod lab_upgrade;
