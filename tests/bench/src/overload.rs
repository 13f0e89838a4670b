//! `ferry-bench overload`: the owner's capacity budget (SPEC 7 rule 7) under load, in one run.
//!
//! Five real `ferry serve` processes on loopback ([`mesh`]): the owner `a` (rules on, no rate
//! limit), the owner `a-off` (rules off), the callers `b` and `c` and, for the last part, a
//! fresh replica `d`. Apps write through `b` and `c` ([`traffic`]). In order:
//! 1. the peak: closed loop, 16 apps x 4 writers over both callers, on `a-off` (and on `a`
//!    for comparison); the unloaded interactive latency: 8 apps x 1 writer on `a`;
//! 2. open-loop offered load at 2x, 5x and 10x the peak, each on `a` then on `a-off`;
//! 3. interactive apps alone, then beside a background flood, on `a` then on `a-off`;
//! 4. polite apps alone, then beside one greedy app, on `a` then on `a-off`;
//! 5. `a` filled with records, interactive writes alone, then while `d` catches up.
//!
//! All of it runs in two shapes ([`Shape`]), each with gateways of its own: the owners held to
//! a quarter of a core by a CPU quota (the owner is the machine's limit, as when a small
//! machine owns a vault bigger ones write to: judged on every target), then sharing the box
//! with everything else (how one box behaves: judged on the promise alone).
//!
//! The figures and the targets are in [`report`]; progress goes to standard error.

mod mesh;
pub mod report;
mod traffic;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cpu;
use crate::ferry_procs::{self, Gateway, GatewayError};
use crate::load::LoadError;
use crate::overload::report::MachineWatch;

use mesh::{Mesh, MeshError, OwnerCounters, VAULT_CATCH_UP, VAULT_OFF, VAULT_ON};
pub use report::Shape;
use report::{
    CatchUp, Figures, Level, OverloadReport, OverloadRuns, Pair, Peak, Phase, Rules, Setup,
};
use traffic::{Class, Group, Pace, Run, Spec, Tally};

/// The apps of the peak and of the offered load, and the writers per app of the peak.
const APPS: usize = 16;
/// Apps the offered load comes from: each app's writes at the owner are capped (4 at once), so
/// the apps together must be able to hold more than the peak's 64 writes.
const OFFERED_APPS: usize = 64;
const WRITERS_PER_APP: usize = 4;
/// The light interactive load: apps with one writer each.
const LIGHT_APPS: usize = 8;
/// The background flood: apps and writers per app.
const FLOOD_APPS: usize = 16;
const FLOOD_PER_APP: usize = 4;
/// The greedy app's writers.
const GREEDY_WRITERS: usize = 64;
/// Writers filling `a` for the replica: apps x writers per app.
const FILL_APPS: usize = 16;
const FILL_PER_APP: usize = 4;
/// Fill rounds before giving up on writes not answered done.
const FILL_ROUNDS: usize = 3;
/// How often the replica's progress is read.
const CATCH_UP_POLL: Duration = Duration::from_millis(50);
/// Interactive writes run this long before the replica is asked to follow.
const CATCH_UP_LEAD: Duration = Duration::from_millis(500);
/// How long the replica may take to reach the owner's last revision once the writes stopped.
const FINAL_CONVERGE_BOUND: Duration = Duration::from_secs(30);

/// The owners' CPU quota of the quota shape, in cores, unless `--owner-cores` says otherwise.
pub const OWNER_CORES: f64 = 0.25;
/// The shipped per-app cap at the owner (`per_caller`, as in [`mesh::CONFIG_ON`]).
const OWNER_CAP_PER_APP: usize = 4;
/// The open-loop generator's bound on writes out at once: what callers with cores of their own
/// keep out. Each app's calling gateway holds it to the owner's cap once the owner said so
/// (answering the excess itself, at once), so the apps of the offered load keep at most the cap
/// each out at the owner; a bound above that only measures the generator's own queue.
pub const MAX_OUTSTANDING: usize = OWNER_CAP_PER_APP * OFFERED_APPS;

/// How much to run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    /// Each measured phase's window.
    pub window: Duration,
    /// The offered loads, as multiples of the peak.
    pub levels: [f64; 3],
    /// `X-Ferry-Timeout` of interactive writes (and of every write of the offered load).
    pub timeout: Duration,
    /// `X-Ferry-Timeout` of background writes: long, so starvation would show as latency
    /// rather than as deadline refusals.
    pub background_timeout: Duration,
    /// The open-loop generator's cap on writes out at once.
    pub max_outstanding: usize,
    /// Records written on `a` before the replica follows.
    pub fill: u64,
    pub fill_bound: Duration,
    /// How long the replica may take to catch up while interactive writes run.
    pub catch_up_bound: Duration,
    /// The pause between phases, for the gateways to settle.
    pub pause: Duration,
    /// The owners' CPU quota in the quota shape, in cores.
    pub owner_cores: f64,
    /// The shapes to run, in order.
    pub shapes: &'static [Shape],
}

impl Plan {
    pub fn full() -> Self {
        Self {
            quick: false,
            window: Duration::from_secs(5),
            levels: [2.0, 5.0, 10.0],
            timeout: Duration::from_secs(2),
            background_timeout: Duration::from_secs(30),
            max_outstanding: MAX_OUTSTANDING,
            fill: 100_000,
            fill_bound: Duration::from_secs(180),
            catch_up_bound: Duration::from_secs(120),
            pause: Duration::from_millis(500),
            owner_cores: OWNER_CORES,
            shapes: &[Shape::Quota, Shape::Shared],
        }
    }

    /// Short phases and a small vault, for smoke tests.
    pub fn quick() -> Self {
        Self {
            quick: true,
            window: Duration::from_secs(1),
            fill: 5_000,
            fill_bound: Duration::from_secs(30),
            catch_up_bound: Duration::from_secs(30),
            pause: Duration::from_millis(200),
            ..Self::full()
        }
    }

    fn describe(&self, shape: Shape) -> String {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let owners = match shape {
            Shape::Quota => format!(
                "each owner (`a`, `a-off`) held to {} of a core by a CPU quota of its own, the \
                 callers, the replica and the generator sharing the rest",
                self.owner_cores
            ),
            Shape::Shared => "nothing held to a quota".to_string(),
        };
        format!(
            "{} run on {cores} cores; five `ferry serve` processes and the load generator (one \
             thread) share them, {owners}. Each write: `PUT` of a {}-byte value under a fresh key, a fresh \
             UUIDv7 `X-Ferry-Request-Id`, `X-Ferry-Timeout: {}` (background writes: {}), through \
             the local API of `b` or `c` (app `i` always through the same one), on keep-alive \
             HTTP/1.1. Windows of {:?}. Owner `a`: rules on, no rate limit (as shipped), the \
             shipped per-caller cap 4, no per-node cap (`per_node = 0`: the apps here stand for \
             apps of many machines, written through two gateways), aging 10 s, queue bound \
             4096. Owner \
             `a-off`: `enabled = false`. Peak: {APPS} apps x {WRITERS_PER_APP} writers, closed \
             loop. Offered load: open loop over {OFFERED_APPS} apps, at most {} writes out at once \
             (arrivals past it are skipped and counted). Flood: {LIGHT_APPS} interactive apps x \
             1 writer beside {FLOOD_APPS} background apps x {FLOOD_PER_APP} writers, each \
             resending a write refused busy under the same request id after 50-100 ms. Greedy: \
             {LIGHT_APPS} polite apps x 1 writer beside one app with {GREEDY_WRITERS} writers \
             through `b`; every one resends a write refused busy or rate_limited under the same \
             request id after 50-100 ms. Catch-up: {} records written on `a` first; \
             {LIGHT_APPS} interactive apps x 1 writer through `b` on that vault.",
            if self.quick { "Quick" } else { "Full" },
            crate::load::VALUE_BYTES,
            traffic::timeout_header(self.timeout),
            traffic::timeout_header(self.background_timeout),
            self.window,
            self.max_outstanding,
            self.fill,
        )
    }
}

/// What to run.
pub type Options = crate::Options<Plan>;

/// `--write-timeout`: decimal seconds, more than 0 and at most 600 (what the local API takes).
pub fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= 600.0 => Ok(seconds),
        _ => Err(format!("{text:?} is not a number of seconds in (0, 600]")),
    }
}

/// `--owner-cores`: a quarter of a core (the kernel's smallest quota, 1 ms, of the 4 ms
/// period) or more, up to the machine's cores.
pub fn parse_cores(text: &str) -> Result<f64, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    match text.parse::<f64>() {
        Ok(c) if (0.25..=cores).contains(&c) => Ok(c),
        _ => Err(format!(
            "{text:?} is not a number of cores in [0.25, {cores}]"
        )),
    }
}

/// Why the run stopped before it could report.
#[derive(Debug, thiserror::Error)]
pub enum OverloadError {
    #[error("no ferry binary to run: {0}")]
    Binary(String),
    #[error(transparent)]
    Mesh(#[from] MeshError),
    #[error(transparent)]
    Proc(#[from] GatewayError),
    #[error("the load generator: {0}")]
    Load(#[from] LoadError),
    #[error("the peak phase gave no throughput to offer multiples of: {figures}")]
    NoPeak { figures: String },
    #[error(
        "filling {vault} on a: {done} of {wanted} records written in {took:?} over \
         {FILL_ROUNDS} rounds; first failures: {first:?}"
    )]
    Fill {
        vault: &'static str,
        done: u64,
        wanted: u64,
        took: Duration,
        first: BTreeMap<&'static str, String>,
    },
}

/// A line of progress, with the seconds since the run started.
fn progress(what: &str) {
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let started = STARTED.get_or_init(Instant::now);
    crate::progress(&format!(
        "[{:6.1} s] {what}",
        started.elapsed().as_secs_f64()
    ));
}

/// Runs every shape of the plan and returns the report. A shape whose quota cannot be set
/// (not root, no cpu controller) is reported as not run, and its targets as unjudged.
pub fn run(options: &Options) -> Result<OverloadRuns, OverloadError> {
    let plan = options.plan;
    let (binary, ready) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);
    ready.map_err(OverloadError::Binary)?;
    let mut runs = OverloadRuns::default();
    for &shape in plan.shapes {
        progress(&format!("the {} shape", shape.name()));
        match run_shape(&plan, &binary, shape) {
            Ok(report) => runs.add(report),
            Err(OverloadError::Mesh(MeshError::Quota(err))) if shape == Shape::Quota => {
                let why = format!("the owners could not be held to a CPU quota: {err}");
                crate::progress(&format!(
                    "NOT RUN: the quota shape, whose figures are judged: {why}"
                ));
                runs.not_run(shape, why);
            }
            Err(err) => return Err(err),
        }
    }
    Ok(runs.judged(plan.quick))
}

/// One shape, on gateways of its own.
fn run_shape(
    plan: &Plan,
    binary: &std::path::Path,
    shape: Shape,
) -> Result<OverloadReport, OverloadError> {
    let watch = MachineWatch::start();
    progress("starting five ferry serve processes (a, a-off, b, c, d)");
    let owner_cores = (shape == Shape::Quota).then_some(plan.owner_cores);
    let mesh = Mesh::start(binary, owner_cores)?;
    let bench = Bench {
        plan: *plan,
        mesh: &mesh,
        keys: std::cell::Cell::new(0),
    };
    let measured = bench.everything();
    let udp_drops = mesh.udp_drops();
    let throttling = mesh.throttling();
    let owner_quota = mesh.quotas.first().map(|quota| quota.describe());
    progress("stopping the gateways");
    let notes = mesh.stop();
    progress("done");
    let (peak, unloaded, levels, flood, greedy, catch_up) = measured?;
    Ok(OverloadReport::new(
        Setup {
            shape,
            plan: plan.describe(shape),
            timeout: plan.timeout,
            max_outstanding: plan.max_outstanding,
            owner_quota,
            owner_throttling: throttling,
        },
        peak,
        unloaded,
        levels,
        flood,
        greedy,
        catch_up,
        notes,
        report::Machine {
            udp_drops_by_gateway: udp_drops,
            ..watch.end(binary.display().to_string())
        },
    ))
}

/// Everything measured, in the report's order.
type Measured = (Peak, Phase, Vec<Level>, Vec<Pair>, Vec<Pair>, CatchUp);

/// The run's state: the plan, the gateways, a counter that keeps every phase's keys apart.
struct Bench<'a> {
    plan: Plan,
    mesh: &'a Mesh,
    keys: std::cell::Cell<u64>,
}

impl Bench<'_> {
    fn everything(&self) -> Result<Measured, OverloadError> {
        let plan = &self.plan;
        progress("peak: 16 apps x 4 writers, closed loop, rules off then on");
        let first_peak = self.peak("peak")?;
        let peak = first_peak.rules_off.group("writes").goodput_per_s;
        progress(&format!(
            "peak {peak:.0} writes/s; unloaded: 8 apps x 1 writer, rules on"
        ));
        let unloaded = self.phase(
            "unloaded, rules on",
            Rules::On,
            vec![self.closed("interactive", "light", LIGHT_APPS, 1, Class::Interactive)],
        )?;

        // Each offered load is measured right after a peak of its own: it multiplies the
        // rules-off one, and the rules-on owner is judged against its own. An owner's peak
        // under its quota drifts by tens of percent from one minute to the next on this shared
        // host, and the two owners apart, so a ratio against a window minutes away, or against
        // the other owner, measured that drift more than the rules (`docs/decisions.md`, "At
        // the limit").
        let mut levels = Vec::new();
        for multiple in plan.levels {
            progress(&format!("peak again before {multiple}x the peak"));
            let peak = self.peak(&format!("peak before {multiple}x"))?;
            let per_second = peak.rules_off.group("writes").goodput_per_s * multiple;
            let offered = |rules: Rules| {
                progress(&format!(
                    "offered {multiple}x the peak ({per_second:.0}/s), open loop, rules {}",
                    rules.name()
                ));
                let group = Group {
                    name: "offered",
                    apps: self.apps("offered", OFFERED_APPS),
                    pace: Pace::Open { per_second },
                    class: Class::Interactive,
                    timeout: plan.timeout,
                    resend_refused: false,
                };
                self.phase(
                    &format!("{multiple}x the peak, rules {}", rules.name()),
                    rules,
                    vec![group],
                )
            };
            levels.push(Level {
                multiple,
                asked_per_s: per_second,
                rules_on: offered(Rules::On)?,
                rules_off: offered(Rules::Off)?,
                peak,
            });
        }

        let mut flood = Vec::new();
        for rules in [Rules::On, Rules::Off] {
            progress(&format!(
                "background flood, rules {}: interactive alone, then beside 16 x 4 background writers",
                rules.name()
            ));
            let interactive =
                || self.closed("interactive", "light", LIGHT_APPS, 1, Class::Interactive);
            let alone = self.phase(
                &format!("interactive alone, rules {}", rules.name()),
                rules,
                vec![interactive()],
            )?;
            let with = self.phase(
                &format!("interactive beside the flood, rules {}", rules.name()),
                rules,
                vec![
                    interactive(),
                    // Bulk work resends what the owner refused busy (nothing ran) after a
                    // pause, as a sync or an import does, rather than dropping it.
                    Group {
                        resend_refused: true,
                        ..self.closed(
                            "background",
                            "flood",
                            FLOOD_APPS,
                            FLOOD_PER_APP,
                            Class::Background,
                        )
                    },
                ],
            )?;
            flood.push(Pair { rules, alone, with });
        }

        let mut greedy = Vec::new();
        for rules in [Rules::On, Rules::Off] {
            progress(&format!(
                "greedy next to polite, rules {}: polite alone, then beside one app with 64 writers",
                rules.name()
            ));
            let polite = || Group {
                resend_refused: true,
                ..self.closed("polite", "polite", LIGHT_APPS, 1, Class::Interactive)
            };
            let alone = self.phase(
                &format!("polite alone, rules {}", rules.name()),
                rules,
                vec![polite()],
            )?;
            let greedy_app = Group {
                name: "greedy",
                apps: vec![(0, "greedy".into())],
                pace: Pace::Closed {
                    per_app: GREEDY_WRITERS,
                },
                class: Class::Interactive,
                timeout: plan.timeout,
                resend_refused: true,
            };
            let with = self.phase(
                &format!("polite beside the greedy app, rules {}", rules.name()),
                rules,
                vec![polite(), greedy_app],
            )?;
            greedy.push(Pair { rules, alone, with });
        }

        let catch_up = self.catch_up()?;
        Ok((first_peak, unloaded, levels, flood, greedy, catch_up))
    }

    /// `count` apps named `<stem>-<i>`, app `i` through caller `i % 2` (`b`, `c`).
    fn apps(&self, stem: &str, count: usize) -> Vec<(usize, String)> {
        (0..count).map(|i| (i % 2, format!("{stem}-{i}"))).collect()
    }

    /// A closed-loop group of `apps` apps with `per_app` writers each.
    fn closed(
        &self,
        name: &'static str,
        stem: &str,
        apps: usize,
        per_app: usize,
        class: Class,
    ) -> Group {
        Group {
            name,
            apps: self.apps(stem, apps),
            pace: Pace::Closed { per_app },
            class,
            timeout: match class {
                Class::Interactive => self.plan.timeout,
                Class::Background => self.plan.background_timeout,
            },
            resend_refused: false,
        }
    }

    /// The peak, closed loop: rules off (what offered loads multiply), then on; named
    /// `<name>, rules off` and `<name>, rules on`.
    fn peak(&self, name: &str) -> Result<Peak, OverloadError> {
        let closed = || self.closed("writes", "peak", APPS, WRITERS_PER_APP, Class::Interactive);
        let rules_off = self.phase(&format!("{name}, rules off"), Rules::Off, vec![closed()])?;
        if rules_off.group("writes").goodput_per_s < 1.0 {
            return Err(OverloadError::NoPeak {
                figures: format!("{:?}", rules_off.group("writes")),
            });
        }
        let rules_on = self.phase(&format!("{name}, rules on"), Rules::On, vec![closed()])?;
        Ok(Peak {
            rules_off,
            rules_on,
        })
    }

    /// A fresh key prefix for a phase.
    fn key_prefix(&self) -> String {
        let n = self.keys.get();
        self.keys.set(n + 1);
        format!("p{n:03}-")
    }

    /// Runs one phase of `groups` through both callers on the owner of `rules`, with the CPU
    /// of every process and the owner's counters around it.
    fn phase(&self, name: &str, rules: Rules, groups: Vec<Group>) -> Result<Phase, OverloadError> {
        let (owner, vault) = match rules {
            Rules::On => (&self.mesh.a, VAULT_ON),
            Rules::Off => (&self.mesh.a_off, VAULT_OFF),
        };
        let spec = Spec {
            endpoints: self.mesh.callers(),
            vault: vault.into(),
            key_prefix: self.key_prefix(),
            groups,
            window: self.plan.window,
            max_writes: None,
            max_outstanding: self.plan.max_outstanding,
        };
        let counters_before = mesh::owner_counters(owner)?;
        // The CPU from the phase's clock on (its connections are opened before).
        let running = traffic::start(spec)?;
        let cpu_before = self.cpu();
        let run = running.join()?;
        let cpu = self.cpu_since(&cpu_before, run.generator_cpu);
        let counters = counters_before.until(&mesh::owner_counters(owner)?);
        progress(&format!(
            "  {name}: connections opened in {:.2} s, ran {:.2} s",
            run.connecting.as_secs_f64(),
            run.ran.as_secs_f64()
        ));
        std::thread::sleep(self.plan.pause);
        Ok(Phase::of(name, rules, &run, None, cpu, &counters))
    }

    /// Every gateway's CPU time so far, by label.
    fn cpu(&self) -> (Instant, BTreeMap<String, Duration>) {
        let m = self.mesh;
        let cpu = [&m.a, &m.a_off, &m.b, &m.c, &m.d]
            .into_iter()
            .filter_map(|g| Some((g.label.clone(), cpu::process_cpu(g.process_id()?)?)))
            .collect();
        (Instant::now(), cpu)
    }

    /// Cores' worth of CPU each gateway (and the generator) used since `before`.
    fn cpu_since(
        &self,
        before: &(Instant, BTreeMap<String, Duration>),
        generator: Option<Duration>,
    ) -> BTreeMap<String, f64> {
        let (at, before) = before;
        let (_, after) = self.cpu();
        let wall = at.elapsed().as_secs_f64().max(1e-9);
        let mut cores: BTreeMap<String, f64> = after
            .iter()
            .filter_map(|(label, cpu)| {
                let used = cpu.saturating_sub(*before.get(label)?);
                Some((label.clone(), used.as_secs_f64() / wall))
            })
            .collect();
        if let Some(generator) = generator {
            cores.insert("generator".into(), generator.as_secs_f64() / wall);
        }
        cores
    }

    /// Part 5: fill `a`, measure interactive writes through `b`, then again while `d`
    /// follows the vault from scratch.
    fn catch_up(&self) -> Result<CatchUp, OverloadError> {
        let plan = &self.plan;
        let mesh = self.mesh;
        progress(&format!(
            "catch-up: writing {} records on a (background, {FILL_APPS} apps x {FILL_PER_APP} writers, through a's own API)",
            plan.fill
        ));
        let fill_started = Instant::now();
        let mut done = 0;
        let mut first = BTreeMap::new();
        for _ in 0..FILL_ROUNDS {
            if done >= plan.fill {
                break;
            }
            let Some(window) = plan.fill_bound.checked_sub(fill_started.elapsed()) else {
                break;
            };
            let spec = Spec {
                endpoints: vec![mesh::endpoint(&mesh.a)],
                vault: VAULT_CATCH_UP.into(),
                key_prefix: self.key_prefix(),
                groups: vec![Group {
                    name: "fill",
                    apps: (0..FILL_APPS).map(|i| (0, format!("fill-{i}"))).collect(),
                    pace: Pace::Closed {
                        per_app: FILL_PER_APP,
                    },
                    class: Class::Background,
                    timeout: plan.background_timeout,
                    // An importer as it should behave: a write refused busy (the owner takes
                    // 16 background writes at once) is sent again under its id.
                    resend_refused: true,
                }],
                window,
                max_writes: Some(plan.fill - done),
                max_outstanding: FILL_APPS * FILL_PER_APP,
            };
            let tally = traffic::run(spec)?.group("fill");
            done += tally.counts.done;
            for (kind, detail) in tally.first {
                first.entry(kind).or_insert(detail);
            }
        }
        let fill_took = fill_started.elapsed();
        if done < plan.fill {
            return Err(OverloadError::Fill {
                vault: VAULT_CATCH_UP,
                done,
                wanted: plan.fill,
                took: fill_took,
                first,
            });
        }
        std::thread::sleep(plan.pause);

        progress("catch-up: interactive writes through b, no replica");
        let interactive = || Spec {
            endpoints: vec![mesh::endpoint(&mesh.b)],
            vault: VAULT_CATCH_UP.into(),
            key_prefix: self.key_prefix(),
            groups: vec![Group {
                name: "interactive",
                apps: (0..LIGHT_APPS).map(|i| (0, format!("light-{i}"))).collect(),
                pace: Pace::Closed { per_app: 1 },
                class: Class::Interactive,
                timeout: plan.timeout,
                resend_refused: false,
            }],
            window: plan.window,
            max_writes: None,
            max_outstanding: LIGHT_APPS,
        };
        let counters_before = mesh::owner_counters(&mesh.a)?;
        let running = traffic::start(interactive())?;
        let cpu_before = self.cpu();
        let run = running.join()?;
        let cpu = self.cpu_since(&cpu_before, run.generator_cpu);
        let counters = counters_before.until(&mesh::owner_counters(&mesh.a)?);
        let without = Phase::of(
            "interactive, no replica catching up",
            Rules::On,
            &run,
            None,
            cpu,
            &counters,
        );
        std::thread::sleep(plan.pause);

        progress("catch-up: interactive writes through b while d follows the vault");
        let running = traffic::start(Spec {
            window: plan.catch_up_bound,
            ..interactive()
        })?;
        std::thread::sleep(CATCH_UP_LEAD);
        let counters_before = mesh::owner_counters(&mesh.a)?;
        let cpu_before = self.cpu();
        let target = mesh::revision(&mesh.a, VAULT_CATCH_UP)?.unwrap_or(0);
        let follow_at = running.started().elapsed();
        let followed =
            mesh.d
                .cli_stdout(&["vault", "follow", VAULT_CATCH_UP, "--owner", &mesh.a.label]);
        let converged_at = match followed {
            Ok(_) => wait_for_revision(&mesh.d, target, plan.catch_up_bound, running.started()),
            Err(err) => Err(OverloadError::Proc(err)),
        };
        running.stop();
        let run = running.join()?;
        let converged_at = converged_at?;
        let window = converged_at.unwrap_or(run.window);
        // The generator's CPU covers the whole run, lead and stop included: close enough.
        let cpu = self.cpu_since(&cpu_before, run.generator_cpu);
        let counters = counters_before.until(&mesh::owner_counters(&mesh.a)?);
        let during = Phase::of(
            "interactive, while d catches up",
            Rules::On,
            &run,
            Some((follow_at, window)),
            cpu,
            &counters,
        );

        // Once the writes stopped, the replica must reach the owner's last revision too.
        let last = mesh::revision(&mesh.a, VAULT_CATCH_UP)?.unwrap_or(0);
        let reached = wait_for_revision(&mesh.d, last, FINAL_CONVERGE_BOUND, Instant::now())?;
        let replica_last = mesh::revision(&mesh.d, VAULT_CATCH_UP)?.unwrap_or(0);
        let catch_up_s = converged_at.map(|at| at.saturating_sub(follow_at).as_secs_f64());
        Ok(CatchUp {
            filled: plan.fill,
            fill_s: fill_took.as_secs_f64(),
            fill_per_s: plan.fill as f64 / fill_took.as_secs_f64().max(1e-9),
            revision_at_follow: target,
            catch_up_s,
            records_per_s: catch_up_s.map(|s| target as f64 / s.max(1e-9)),
            owner_revision_at_end: last,
            replica_revision_at_end: replica_last,
            converged_at_end: reached.is_some(),
            without,
            during,
        })
    }
}

/// Waits (bounded) until `replica`'s revision of the catch-up vault reaches `target`; returns
/// when, from `since`, or `None` if the bound passed first.
fn wait_for_revision(
    replica: &Gateway,
    target: u64,
    bound: Duration,
    since: Instant,
) -> Result<Option<Duration>, OverloadError> {
    let started = Instant::now();
    loop {
        if mesh::revision(replica, VAULT_CATCH_UP)?.is_some_and(|rev| rev >= target) {
            return Ok(Some(since.elapsed()));
        }
        if started.elapsed() >= bound {
            return Ok(None);
        }
        std::thread::sleep(CATCH_UP_POLL);
    }
}

impl Phase {
    /// A phase's figures from its run; `within` narrows the done writes' latencies (and the
    /// goodput's window) to those first sent in that span.
    fn of(
        name: &str,
        rules: Rules,
        run: &Run,
        within: Option<(Duration, Duration)>,
        cpu_cores: BTreeMap<String, f64>,
        counters: &OwnerCounters,
    ) -> Self {
        let (from, to) = within.unwrap_or((Duration::ZERO, run.window));
        let window = to.saturating_sub(from);
        let groups = run
            .groups
            .iter()
            .map(|(group, tally)| {
                let latencies = match within {
                    Some((from, to)) => tally.done_within(from, to),
                    None => tally.done_sorted(),
                };
                let answered = tally.done_answered_within(from, to);
                (
                    group.to_string(),
                    figures(tally, latencies, answered, window),
                )
            })
            .collect();
        Phase {
            name: name.to_string(),
            rules,
            window_s: window.as_secs_f64(),
            groups,
            cpu_cores,
            owner_refusals: counters.refusals.clone(),
            owner_waits: ["interactive", "background"]
                .into_iter()
                .map(|class| (class.to_string(), counters.waits(class)))
                .filter(|(_, waits)| waits.count > 0)
                .collect(),
        }
    }
}

/// A group's figures: its answers over the whole phase, its latencies from `latencies`
/// (sorted), its goodput the `answered` done writes over `window`.
fn figures(tally: &Tally, latencies: Vec<Duration>, answered: u64, window: Duration) -> Figures {
    let secs = window.as_secs_f64().max(1e-9);
    let micros = |d: Duration| d.as_nanos() as f64 / 1000.0;
    let pick = |p| crate::load::percentile(&latencies, p).map(micros);
    Figures {
        sent_per_s: tally.counts.total() as f64 / secs,
        goodput_per_s: answered as f64 / secs,
        measured: latencies.len() as u64,
        counts: tally.counts,
        skipped: tally.skipped,
        resends: tally.resends,
        p50_us: pick(50.0),
        p99_us: pick(99.0),
        max_done_us: latencies.last().copied().map(micros),
        max_any_us: micros(tally.max_any),
        first: tally
            .first
            .iter()
            .map(|(kind, detail)| (kind.to_string(), detail.clone()))
            .collect(),
    }
}
