//! The lab: several machines on one box, each a network namespace, wired to two switches, so
//! tests can run real `ferry serve` processes on separate hosts and pull cables, power hosts
//! off, drop or lose packets, and kill processes (see `docs/lab.md`).
//!
//! A [`Lab`] owns its namespaces: a switch namespace holding two bridges (`lan` and `tailnet`)
//! and one namespace per host, host I with `lan0` = 10.77.0.I/24 and `ts0` = 100.77.0.I/24.
//! Nothing is ever added to the root namespace, so its firewall and routes are never touched.
//! Every name carries a per-run prefix; dropping the lab (also while a test panics) kills every
//! process left in its namespaces and deletes them. Lab tests of one process run one after
//! another through a lock, or beside each other when they check no timing
//! ([`Lab::new_beside_others`]), and need root: without it [`Lab::new`] says SKIPPED and returns
//! `None`, unless `FERRY_LAB_REQUIRED=1` (set in CI) makes that a failure.
//!
//! A gateway in a host is the harness's one [`Gateway`] type, started by the same code as on
//! loopback, at [`Place::Lab`] (so its commands run through `ip netns exec`): of this build or
//! of another binary (an older release, for upgrades: [`Lab::start_ferry_with`],
//! [`Gateway::restart_on`]). Its local API is on loopback inside that host, so tests talk to it
//! only from inside that namespace: through the CLI, or a program started there
//! ([`Lab::spawn_in`]).

// Test support: a lab that cannot be built or driven fails the test (or campaign) using it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, Once};
use std::time::Instant;

use crate::skip_or_fail;
use ferry_harness::{describe, Gateway, LabHost, Options, Place};

/// The QUIC port every lab gateway listens on (each host has its own addresses).
pub const FERRY_PORT: u16 = 7420;

/// The largest lab: host numbers end up in addresses and in 15-character interface names.
pub const MAX_HOSTS: usize = 99;

/// A lab that measures time has the process's labs to itself: on a shared CPU their timings
/// would disturb each other, and a fault in one lab must not be measured by another. Labs that
/// only check promises (the campaign's) take their turn beside each other
/// ([`Lab::new_beside_others`]); they are as isolated from each other as from an alone one (their
/// own namespaces, switches and prefixes), only not from its CPU.
static LAB_TURNS: Turns = Turns {
    held: Mutex::new(Held {
        alone: false,
        beside: 0,
    }),
    changed: Condvar::new(),
};

/// The labs' turns: one alone, or any number beside each other. Unlike `RwLock` (whose Linux
/// version lets no reader in while a writer waits), a lab asking to run beside others joins
/// those running whenever no lab runs alone: the promise-only labs all start at once and overlap,
/// instead of each queueing behind the timing labs that arrived before it. The timing labs
/// wait for them to end; the promise-only ones are few and all start early, so none waits long.
struct Turns {
    held: Mutex<Held>,
    changed: Condvar,
}

struct Held {
    alone: bool,
    beside: usize,
}

/// A lab's turn, held for its whole life and given back when dropped.
struct Turn {
    alone: bool,
}

impl Turn {
    /// Waits for a turn alone (no other lab) or beside others (no lab alone).
    fn take(alone: bool) -> Turn {
        // A poisoned lock only means an earlier lab test panicked; the counts stay right, since
        // a turn is given back by its drop, which runs while unwinding too.
        let held = LAB_TURNS.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut held = LAB_TURNS
            .changed
            .wait_while(held, |h| h.alone || (alone && h.beside > 0))
            .unwrap_or_else(|p| p.into_inner());
        if alone {
            held.alone = true;
        } else {
            held.beside += 1;
        }
        Turn { alone }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut held = LAB_TURNS.held.lock().unwrap_or_else(|p| p.into_inner());
        if self.alone {
            held.alone = false;
        } else {
            held.beside -= 1;
        }
        LAB_TURNS.changed.notify_all();
    }
}

/// Labs made by this process so far; part of the next lab's prefix.
static LAB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A host's network card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    /// `lan0`, 10.77.0.I, on the `lan` switch.
    Lan,
    /// `ts0`, 100.77.0.I, on the `tailnet` switch.
    Tailnet,
}

impl Nic {
    /// The interface's name inside the host.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lan => "lan0",
            Self::Tailnet => "ts0",
        }
    }
}

impl fmt::Display for Nic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Packets a host's drop and loss rules dropped, by direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    pub inbound: u64,
    pub outbound: u64,
}

/// The current test's name, for the SKIPPED line (libtest names each test's thread after it).
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "a lab test".to_string(),
    }
}

/// Runs a program to completion with no input.
fn run_output(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| {
            panic!("could not run {program} {args:?}: {err} (the lab needs iproute2 and nftables)")
        })
}

/// Runs a program and panics, naming the command, unless it succeeds.
fn run(program: &str, args: &[&str]) -> Output {
    let output = run_output(program, args);
    assert!(
        output.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        describe(&output)
    );
    output
}

/// `ip` with these arguments; panics unless it succeeds.
fn ip(args: &[&str]) {
    run("ip", args);
}

/// Names of the network namespaces on this box (`ip netns list`).
pub fn netns_list() -> Vec<String> {
    let output = run_output("ip", &["netns", "list"]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Kills every process inside `ns` and deletes it. Best effort: teardown must not panic.
fn delete_netns(ns: &str) {
    let pids = run_output("ip", &["netns", "pids", ns]);
    for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
        let _ = run_output("kill", &["-9", pid]);
    }
    let deleted = run_output("ip", &["netns", "delete", ns]);
    if !deleted.status.success() && netns_list().iter().any(|n| n == ns) {
        eprintln!(
            "lab: could not delete namespace {ns}: {}",
            describe(&deleted)
        );
    }
}

/// Deletes every namespace whose name starts with `prefix`: host namespaces first, so their
/// veth pairs go before the switch that holds the other ends.
fn delete_netns_with_prefix(prefix: &str) {
    let mut names: Vec<String> = netns_list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort_by_key(|n| n.ends_with("-sw"));
    for ns in names {
        delete_netns(&ns);
    }
}

/// The pid in a lab namespace's name (`fl<pid base 36>-<counter>-<sw|hI>`), if it is one.
fn lab_owner(ns: &str) -> Option<u32> {
    let rest = ns.strip_prefix("fl")?;
    let mut parts = rest.split('-');
    let (pid, counter, node) = (parts.next()?, parts.next()?, parts.next()?);
    let is_node = node == "sw"
        || node
            .strip_prefix('h')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let base36_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    if parts.next().is_some() || !is_node || !base36_ok(counter) || !base36_ok(pid) {
        return None;
    }
    u32::from_str_radix(pid, 36).ok()
}

/// Deletes labs whose test process is gone (SIGKILLed, so its teardown never ran): their
/// gateways would otherwise run on and hold the namespaces forever. A lab whose pid runs is
/// left alone, whoever runs it.
fn delete_orphaned_labs() {
    let mut orphans: Vec<String> = netns_list()
        .into_iter()
        .filter(|ns| lab_owner(ns).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()))
        .collect();
    orphans.sort_by_key(|n| n.ends_with("-sw"));
    for ns in orphans {
        eprintln!("lab: deleting {ns}, left by a test process that no longer runs");
        delete_netns(&ns);
    }
}

/// Several hosts on two switches, each host a network namespace (see the module docs).
pub struct Lab {
    /// Unique to this lab while it lives: `fl<pid base 36>-<counter base 36>`, at most 10
    /// characters, so `<prefix>-<I>l` fits the 15 characters of an interface name.
    prefix: String,
    hosts: usize,
    /// Held for the lab's whole life; released after the teardown (fields drop after `drop`).
    _turn: Turn,
}

impl fmt::Debug for Lab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lab")
            .field("prefix", &self.prefix)
            .field("hosts", &self.hosts)
            .finish()
    }
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

impl Lab {
    /// Builds a lab of `hosts` hosts (numbered 1..=hosts), or says SKIPPED on standard error
    /// and returns `None` when not running as root. With `FERRY_LAB_REQUIRED=1` (as in CI) a
    /// missing prerequisite (root, `ip`) fails the test instead of skipping it; so does a lab
    /// that cannot be built, with or without it.
    pub fn new(hosts: usize) -> Option<Lab> {
        Lab::build_holding(hosts, || Turn::take(true))
    }

    /// As [`Lab::new`], for a lab whose test checks promises and no timing: it runs beside other
    /// such labs of this process (never beside a lab made with [`Lab::new`]), so a CI run's
    /// campaigns overlap instead of queueing.
    pub fn new_beside_others(hosts: usize) -> Option<Lab> {
        Lab::build_holding(hosts, || Turn::take(false))
    }

    fn build_holding(hosts: usize, take_turn: impl FnOnce() -> Turn) -> Option<Lab> {
        if !crate::running_as_root() {
            skip_or_fail(
                &test_name(),
                "lab tests need root for network namespaces (run as root; CI does)",
            );
            return None;
        }
        if crate::lab_required() && !crate::have_ip() {
            panic!(
                "{} cannot run: `ip` (iproute2) is missing, and the lab builds its hosts with it; \
                 {} is set, so this is a failure, not a skip",
                test_name(),
                crate::LAB_REQUIRED_VAR
            );
        }
        assert!(
            (1..=MAX_HOSTS).contains(&hosts),
            "a lab has 1 to {MAX_HOSTS} hosts, not {hosts}"
        );
        let turn = take_turn();
        let pid_part = format!("fl{}-", base36(std::process::id()));
        // Anything named after this pid was left by an earlier process that had the same pid
        // and died before its teardown. Cleared once, before this process makes any lab: labs
        // beside each other are built at the same time, and a later one must not clear an
        // earlier one's.
        static CLEARED: Once = Once::new();
        CLEARED.call_once(|| delete_netns_with_prefix(&pid_part));
        let counter = LAB_COUNTER.fetch_add(1, Ordering::Relaxed);
        delete_orphaned_labs();
        let lab = Lab {
            prefix: format!("{pid_part}{}", base36(counter % 1296)),
            hosts,
            _turn: turn,
        };
        delete_netns_with_prefix(&format!("{}-", lab.prefix));
        // If building panics, `lab` is dropped while unwinding and tears down what exists.
        let started = Instant::now();
        lab.build();
        eprintln!(
            "lab {}: {hosts} hosts built in {:?}",
            lab.prefix,
            started.elapsed()
        );
        Some(lab)
    }

    fn build(&self) {
        let sw = self.switch_ns();
        ip(&["netns", "add", &sw]);
        self.quiet_ipv6(&sw);
        for bridge in [self.lan_bridge(), self.tailnet_bridge()] {
            ip(&[
                "-n",
                &sw,
                "link",
                "add",
                &bridge,
                "type",
                "bridge",
                "mcast_snooping",
                "0",
                "stp_state",
                "0",
            ]);
            ip(&["-n", &sw, "link", "set", &bridge, "up"]);
        }
        for host in 1..=self.hosts {
            let ns = self.host_ns(host);
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            // Before any interface arrives: no IPv6 means no duplicate address detection to
            // wait for (mDNS over IPv4 is enough).
            self.quiet_ipv6(&ns);
            self.sysctl(&ns, "net.ipv4.icmp_ratelimit=0");
            for (nic, port, bridge, addr) in [
                (
                    Nic::Lan,
                    self.lan_port(host),
                    self.lan_bridge(),
                    format!("10.77.0.{host}/24"),
                ),
                (
                    Nic::Tailnet,
                    self.tailnet_port(host),
                    self.tailnet_bridge(),
                    format!("100.77.0.{host}/24"),
                ),
            ] {
                // Made inside the switch namespace, so nothing ever appears in the root one.
                ip(&[
                    "-n",
                    &sw,
                    "link",
                    "add",
                    &port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    nic.name(),
                    "netns",
                    &ns,
                ]);
                ip(&["-n", &sw, "link", "set", &port, "master", &bridge]);
                ip(&["-n", &sw, "link", "set", &port, "up"]);
                ip(&["-n", &ns, "addr", "add", &addr, "dev", nic.name()]);
                ip(&["-n", &ns, "link", "set", nic.name(), "up"]);
            }
            // A real tailnet carries no multicast.
            ip(&[
                "-n",
                &sw,
                "link",
                "set",
                &self.tailnet_port(host),
                "type",
                "bridge_slave",
                "mcast_flood",
                "off",
            ]);
        }
    }

    fn sysctl(&self, ns: &str, setting: &str) {
        run("ip", &["netns", "exec", ns, "sysctl", "-qw", setting]);
    }

    fn quiet_ipv6(&self, ns: &str) {
        self.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1");
        self.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1");
    }

    /// This lab's name prefix (namespaces `<prefix>-sw`, `<prefix>-h<I>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How many hosts the lab has.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    fn check(&self, host: usize) {
        assert!(
            (1..=self.hosts).contains(&host),
            "the lab has hosts 1..={}, not host {host}",
            self.hosts
        );
    }

    /// The switch namespace.
    pub fn switch_ns(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// Host `host`'s namespace.
    pub fn host_ns(&self, host: usize) -> String {
        self.check(host);
        format!("{}-h{host}", self.prefix)
    }

    fn lan_bridge(&self) -> String {
        format!("{}-lan", self.prefix)
    }

    fn tailnet_bridge(&self) -> String {
        format!("{}-ts", self.prefix)
    }

    /// The switch's end of host `host`'s LAN cable.
    pub fn lan_port(&self, host: usize) -> String {
        self.check(host);
        format!("{}-{host}l", self.prefix)
    }

    /// The switch's end of host `host`'s tailnet link.
    pub fn tailnet_port(&self, host: usize) -> String {
        self.check(host);
        format!("{}-{host}t", self.prefix)
    }

    fn port(&self, host: usize, nic: Nic) -> String {
        match nic {
            Nic::Lan => self.lan_port(host),
            Nic::Tailnet => self.tailnet_port(host),
        }
    }

    /// Host `host`'s address on `nic`.
    pub fn addr(&self, host: usize, nic: Nic) -> String {
        self.check(host);
        match nic {
            Nic::Lan => format!("10.77.0.{host}"),
            Nic::Tailnet => format!("100.77.0.{host}"),
        }
    }

    fn set_port(&self, host: usize, nic: Nic, state: &str) {
        ip(&[
            "-n",
            &self.switch_ns(),
            "link",
            "set",
            &self.port(host, nic),
            state,
        ]);
    }

    /// Pulls host `host`'s LAN cable: its `lan0` sees NO-CARRIER, nothing crosses.
    pub fn cut_cable(&self, host: usize) {
        self.set_port(host, Nic::Lan, "down");
    }

    /// Plugs host `host`'s LAN cable back in.
    pub fn heal_cable(&self, host: usize) {
        self.set_port(host, Nic::Lan, "up");
    }

    /// Cuts host `host`'s tailnet link.
    pub fn cut_tailnet(&self, host: usize) {
        self.set_port(host, Nic::Tailnet, "down");
    }

    /// Restores host `host`'s tailnet link.
    pub fn heal_tailnet(&self, host: usize) {
        self.set_port(host, Nic::Tailnet, "up");
    }

    /// Host `host` vanishes from both networks; its processes keep running.
    pub fn power_off(&self, host: usize) {
        self.cut_cable(host);
        self.cut_tailnet(host);
    }

    /// Host `host` is back on both networks.
    pub fn power_on(&self, host: usize) {
        self.heal_cable(host);
        self.heal_tailnet(host);
    }

    /// Runs `nft -f -` inside host `host` with `script` on its standard input.
    fn nft(&self, host: usize, script: &str) {
        self.nft_in(&self.host_ns(host), script);
    }

    /// Runs `nft -f -` inside namespace `ns` with `script` on its standard input.
    fn nft_in(&self, ns: &str, script: &str) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ip netns exec ... nft (the lab needs nftables)");
        child
            .stdin
            .take()
            .expect("nft's stdin")
            .write_all(script.as_bytes())
            .expect("write the nft script");
        let output = child.wait_with_output().expect("wait for nft");
        assert!(
            output.status.success(),
            "nft in {ns} failed on\n{script}\n{}",
            describe(&output)
        );
    }

    /// The lab's nftables table in a host, made if absent (`add` is idempotent).
    const NFT_TABLE: &'static str = "add table inet lab
add chain inet lab in { type filter hook input priority -300; policy accept; }
add chain inet lab out { type filter hook output priority -300; policy accept; }
";

    /// The LAN switch stops forwarding mDNS multicast (224.0.0.251 and ff02::fb, by their
    /// multicast MAC addresses), as a Wi-Fi with client isolation or a switch with IGMP snooping
    /// and no querier does: unicast still crosses, and each host still hears its own
    /// announcements (they loop back inside the host).
    pub fn drop_lan_multicast(&self) {
        self.nft_in(
            &self.switch_ns(),
            "add table bridge lab
add chain bridge lab relay { type filter hook forward priority -300; policy accept; }
add rule bridge lab relay ether daddr 01:00:5e:00:00:fb counter drop
add rule bridge lab relay ether daddr 33:33:00:00:00:fb counter drop
",
        );
    }

    /// Drops everything in and out on host `host`'s `nic`; the link stays up, so nothing on
    /// either side sees a carrier change or gets an ICMP answer.
    pub fn silent_drop(&self, host: usize, nic: Nic) {
        let name = nic.name();
        self.nft(
            host,
            &format!(
                "{}add rule inet lab in iifname \"{name}\" counter drop
add rule inet lab out oifname \"{name}\" counter drop
",
                Self::NFT_TABLE
            ),
        );
    }

    /// Loses `percent` % of packets at random, in each direction, on host `host`'s `lan0`.
    pub fn random_loss(&self, host: usize, percent: u8) {
        assert!(percent <= 100, "a loss of {percent}% is not a percentage");
        self.nft(
            host,
            &format!(
                "{}add rule inet lab in iifname \"lan0\" numgen random mod 100 < {percent} counter drop
add rule inet lab out oifname \"lan0\" numgen random mod 100 < {percent} counter drop
",
                Self::NFT_TABLE
            ),
        );
    }

    /// Loses `percent` % of packets at random, in each direction, on both of host `host`'s
    /// cards (the LAN and the tailnet).
    pub fn random_loss_everywhere(&self, host: usize, percent: u8) {
        assert!(percent <= 100, "a loss of {percent}% is not a percentage");
        let mut script = Self::NFT_TABLE.to_string();
        for nic in [Nic::Lan, Nic::Tailnet] {
            let name = nic.name();
            script.push_str(&format!(
                "add rule inet lab in iifname \"{name}\" numgen random mod 100 < {percent} counter drop
add rule inet lab out oifname \"{name}\" numgen random mod 100 < {percent} counter drop
"
            ));
        }
        self.nft(host, &script);
    }

    /// Splits the lab in two: nothing crosses between a host of `side` and a host not in it,
    /// on either network, while each side still talks within itself. Healed by
    /// [`Lab::clear_drop`] on every host.
    pub fn partition(&self, side: &[usize]) {
        let addrs = |hosts: &[usize]| {
            hosts
                .iter()
                .flat_map(|h| [self.addr(*h, Nic::Lan), self.addr(*h, Nic::Tailnet)])
                .collect::<Vec<_>>()
                .join(", ")
        };
        let other: Vec<usize> = (1..=self.hosts).filter(|h| !side.contains(h)).collect();
        if side.is_empty() || other.is_empty() {
            return;
        }
        for host in 1..=self.hosts {
            let far = if side.contains(&host) {
                &other[..]
            } else {
                side
            };
            let far = addrs(far);
            self.nft(
                host,
                &format!(
                    "{}add rule inet lab in ip saddr {{ {far} }} counter drop
add rule inet lab out ip daddr {{ {far} }} counter drop
",
                    Self::NFT_TABLE
                ),
            );
        }
    }

    /// Removes every drop and loss rule from host `host`.
    pub fn clear_drop(&self, host: usize) {
        self.nft(host, "add table inet lab\ndelete table inet lab\n");
    }

    /// Packets dropped so far by host `host`'s drop and loss rules (zeros when it has none).
    pub fn dropped_packets(&self, host: usize) -> Dropped {
        let mut dropped = Dropped::default();
        let listed = self.exec(host, "nft", &["list", "table", "inet", "lab"]);
        if !listed.status.success() {
            return dropped;
        }
        let text = String::from_utf8_lossy(&listed.stdout);
        let mut inbound = true;
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.first() == Some(&"chain") {
                inbound = words.get(1) == Some(&"in");
            }
            let packets: u64 = words
                .windows(2)
                .filter(|pair| pair[0] == "packets")
                .filter_map(|pair| pair[1].parse::<u64>().ok())
                .sum();
            if inbound {
                dropped.inbound += packets;
            } else {
                dropped.outbound += packets;
            }
        }
        dropped
    }

    /// Whether host `host`'s `nic` sees a carrier (its cable is in and the switch port is up).
    pub fn has_carrier(&self, host: usize, nic: Nic) -> bool {
        let shown = run(
            "ip",
            &["-n", &self.host_ns(host), "-o", "link", "show", nic.name()],
        );
        !String::from_utf8_lossy(&shown.stdout).contains("NO-CARRIER")
    }

    /// Runs `program args...` inside host `host` and returns what it did (not checked).
    pub fn exec(&self, host: usize, program: &str, args: &[&str]) -> Output {
        let ns = self.host_ns(host);
        let mut all = vec!["netns", "exec", &ns, program];
        all.extend_from_slice(args);
        run_output("ip", &all)
    }

    /// Starts `program args...` inside host `host` in the background (not a gateway: an app,
    /// say), its standard output and error appended to `log`, with `env` added. The caller
    /// waits for it; whatever still runs in the host when the lab is torn down is killed.
    pub fn spawn_in(
        &self,
        host: usize,
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Child {
        let ns = self.host_ns(host);
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap_or_else(|err| panic!("open {}: {err}", log.display()))
        };
        Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(open())
            .stderr(open())
            .spawn()
            .unwrap_or_else(|err| panic!("spawn ip netns exec {ns} {}: {err}", program.display()))
    }

    /// Where a gateway on host `host` runs, its QUIC endpoint on `port`.
    pub fn place_on_port(&self, host: usize, port: u16) -> Place {
        Place::Lab(LabHost {
            number: host,
            ns: self.host_ns(host),
            port,
            lan_addr: format!("{}:{port}", self.addr(host, Nic::Lan)),
            tailnet_addr: format!("{}:{port}", self.addr(host, Nic::Tailnet)),
        })
    }

    /// Where a gateway on host `host` runs, on the lab's port ([`FERRY_PORT`]).
    pub fn place(&self, host: usize) -> Place {
        self.place_on_port(host, FERRY_PORT)
    }

    /// Starts `ferry serve` on host `host` in a fresh home, its QUIC endpoint on
    /// 0.0.0.0:7420 and its API on loopback inside the host; waits (bounded) for `api.addr`.
    pub fn start_ferry(&self, host: usize, label: &str, extra_serve_args: &[&str]) -> Gateway {
        self.start_ferry_with(host, label, Options::new().args(extra_serve_args))
    }

    /// [`Lab::start_ferry`] with extra environment for the gateway process (e.g. a `PATH`
    /// with a fake `tailscale` first).
    pub fn start_ferry_with_env(
        &self,
        host: usize,
        label: &str,
        extra_serve_args: &[&str],
        env: &[(&str, &str)],
    ) -> Gateway {
        self.start_ferry_with(host, label, Options::new().args(extra_serve_args).env(env))
    }

    /// [`Lab::start_ferry`] with every option: another gateway binary (an older release, whose
    /// CLI then also runs this gateway's commands), a `config.toml` written into the fresh home
    /// before the first start, extra arguments and environment.
    pub fn start_ferry_with(&self, host: usize, label: &str, options: Options) -> Gateway {
        Gateway::start_at(self.place(host), label, options)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let started = Instant::now();
        delete_netns_with_prefix(&format!("{}-", self.prefix));
        let left: Vec<String> = netns_list()
            .into_iter()
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .collect();
        if left.is_empty() {
            eprintln!("lab {}: torn down in {:?}", self.prefix, started.elapsed());
        } else {
            eprintln!("lab {}: LEFT BEHIND namespaces {left:?}", self.prefix);
        }
    }
}

/// `ferry trust` on `me` of `them`, with both routes: the LAN one and the tailnet one.
pub fn trust_by_both_routes(me: &Gateway, them: &Gateway) -> Output {
    let lan = format!("{},lan", them.lan_addr());
    let tailnet = format!("{},tailnet", them.tailnet_addr());
    me.cli(&[
        "trust",
        &them.node_id,
        "--label",
        &them.label,
        "--addr",
        &lan,
        "--addr",
        &tailnet,
    ])
}

/// Makes every gateway trust every other, with both routes: the LAN one and the tailnet one.
pub fn trust_all(gateways: &[&Gateway]) {
    for me in gateways {
        for them in gateways {
            if me.node_id == them.node_id {
                continue;
            }
            let out = trust_by_both_routes(me, them);
            assert!(
                out.status.success(),
                "{} trusting {}: {}",
                me.label,
                them.label,
                describe(&out)
            );
        }
    }
}
