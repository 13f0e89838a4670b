use super::*;

const I: Priority = Priority::Interactive;
const B: Priority = Priority::Background;

fn later(now: Instant) -> Instant {
    now + Duration::from_secs(30)
}

// Callers named by a bare name or number in these tests are each a node of their own.
impl Caller for &'static str {
    type Node = Self;
    fn node(&self) -> Self {
        self
    }
}

impl Caller for usize {
    type Node = Self;
    fn node(&self) -> Self {
        *self
    }
}

#[test]
fn a_fifth_write_of_one_app_is_busy_and_the_cap_frees_as_writes_finish() {
    let mut gate = Gate::new(CapacityRules::default());
    let now = Instant::now();
    let app = ("node-a", "notes");
    for _ in 0..4 {
        gate.arrive(&app, I, later(now), now).unwrap();
    }
    let refused = gate.arrive(&app, I, later(now), now).unwrap_err();
    assert_eq!(refused.why, Refused::CallerCap);
    assert!(refused.retry_after > Duration::ZERO);
    // Another app of the same node, and the same app on another node, are not held back.
    gate.arrive(&("node-a", "photos"), I, later(now), now)
        .unwrap();
    gate.arrive(&("node-b", "notes"), I, later(now), now)
        .unwrap();
    gate.dequeued(I);
    gate.finished(&app, I);
    gate.arrive(&app, I, later(now), now).unwrap();
}

#[test]
fn the_601st_write_of_a_minute_is_rate_limited_and_the_budget_refills() {
    let rules = CapacityRules {
        per_caller: u32::MAX,
        per_node: 0,
        rate_per_minute: 600,
        queue_depth: usize::MAX,
        interactive_wait: Duration::ZERO,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    let app = "a";
    for n in 0..600 {
        assert!(gate.arrive(&app, I, later(now), now).is_ok(), "write {n}");
    }
    let refused = gate.arrive(&app, I, later(now), now).unwrap_err();
    assert_eq!(refused.why, Refused::RateLimited);
    assert_eq!(refused.retry_after, Duration::from_millis(100));
    // A tenth of a second later, one more fits (600 a minute), and only one.
    let then = now + Duration::from_millis(100);
    gate.arrive(&app, I, later(then), then).unwrap();
    assert!(gate.arrive(&app, I, later(then), then).is_err());
}

#[test]
fn a_busy_refusal_spends_nothing_of_the_rate_budget() {
    let rules = CapacityRules {
        per_caller: 2,
        rate_per_minute: 60,
        rate_burst: 3,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    let app = "a";
    gate.arrive(&app, I, later(now), now).unwrap();
    gate.arrive(&app, I, later(now), now).unwrap();
    // Over the cap: busy, many times; none of it is spent.
    for _ in 0..10 {
        assert_eq!(
            gate.arrive(&app, I, later(now), now).unwrap_err().why,
            Refused::CallerCap
        );
    }
    gate.finished(&app, I);
    gate.finished(&app, I);
    // The third of the burst is still there.
    gate.arrive(&app, I, later(now), now).unwrap();
    gate.finished(&app, I);
    assert_eq!(
        gate.arrive(&app, I, later(now), now).unwrap_err().why,
        Refused::RateLimited
    );
    // A write admitted and then refused busy at its start gets its spending back.
    let then = now + Duration::from_secs(1);
    gate.arrive(&app, I, later(then), then).unwrap();
    gate.dequeued(I);
    gate.refund(&app);
    gate.finished(&app, I);
    gate.arrive(&app, I, later(then), then).unwrap();
}

#[test]
fn a_full_queue_or_a_passed_deadline_is_busy() {
    let rules = CapacityRules {
        queue_depth: 2,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    assert_eq!(
        gate.arrive(&"a", I, now, now).unwrap_err().why,
        Refused::DeadlinePassed
    );
    gate.arrive(&"a", I, later(now), now).unwrap();
    gate.arrive(&"b", B, later(now), now).unwrap();
    assert_eq!(gate.queued(), (1, 1));
    assert_eq!(
        gate.arrive(&"c", I, later(now), now).unwrap_err().why,
        Refused::QueueFull
    );
    gate.dequeued(B);
    gate.arrive(&"c", I, later(now), now).unwrap();
}

#[test]
fn with_the_rules_off_nothing_but_the_queue_bounds_a_caller() {
    let rules = CapacityRules {
        enabled: false,
        queue_depth: 100,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    for _ in 0..100 {
        gate.arrive(&"greedy", I, later(now), now).unwrap();
    }
    assert_eq!(
        gate.arrive(&"greedy", I, later(now), now).unwrap_err().why,
        Refused::QueueFull
    );
}

#[test]
fn interactive_goes_first_until_a_background_request_has_waited_ten_seconds() {
    let mut queue = ClassQueue::new(&CapacityRules::default());
    let t0 = Instant::now();
    queue.push(B, t0, "bulk-1");
    queue.push(I, t0 + Duration::from_secs(1), "app-1");
    queue.push(I, t0 + Duration::from_secs(2), "app-2");
    let at = t0 + Duration::from_secs(3);
    assert_eq!(queue.pop(at, true).map(|(_, item)| item), Some("app-1"));
    // Ten seconds after it arrived, the background request goes before the waiting app write.
    let aged = t0 + Duration::from_secs(10);
    assert_eq!(queue.pop(aged, true).map(|(_, item)| item), Some("bulk-1"));
    assert_eq!(queue.pop(aged, true).map(|(_, item)| item), Some("app-2"));
    assert!(queue.is_empty());
}

#[test]
fn with_the_rules_off_the_queue_is_first_come_first_served() {
    let rules = CapacityRules {
        enabled: false,
        ..CapacityRules::default()
    };
    let mut queue = ClassQueue::new(&rules);
    let t0 = Instant::now();
    queue.push(B, t0, "bulk");
    queue.push(I, t0, "app");
    assert_eq!(queue.pop(t0, true).map(|(_, item)| item), Some("bulk"));
}

#[test]
fn a_write_starts_only_if_it_can_finish_before_its_deadline() {
    let now = Instant::now();
    let service = Duration::from_millis(20);
    assert!(at_start(now + Duration::from_millis(50), now, service).is_ok());
    assert_eq!(
        at_start(now + Duration::from_millis(10), now, service)
            .unwrap_err()
            .why,
        Refused::DeadlinePassed
    );
    let mut estimate = ServiceTime::default();
    estimate.observe(Duration::from_millis(8));
    assert_eq!(estimate.estimate(), Duration::from_millis(8));
    // One stall does not become the estimate, nor does it grow past the cap.
    estimate.observe(Duration::from_secs(30));
    assert!(estimate.estimate() < Duration::from_millis(50));
}

#[test]
fn idle_callers_are_forgotten_when_too_many_are_tracked() {
    let rules = CapacityRules {
        rate_per_minute: 600,
        node_rate_per_minute: 6000,
        queue_depth: usize::MAX,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    for n in 0..MAX_TRACKED + 10 {
        gate.arrive(&n, I, later(now), now).unwrap();
        gate.dequeued(I);
        gate.finished(&n, I);
    }
    // Their budgets refill within a minute; then a new caller makes room.
    let much_later = now + Duration::from_secs(61);
    gate.arrive(&usize::MAX, I, later(much_later), much_later)
        .unwrap();
    assert!(gate.callers.len() <= 2, "{}", gate.callers.len());
    assert!(gate.nodes.len() <= 2, "{}", gate.nodes.len());
}

#[test]
fn a_waiting_write_is_withdrawn_in_time_for_its_answer_to_travel_back() {
    let now = Instant::now();
    let long = now + Duration::from_secs(30);
    assert_eq!(withdraw_at(long, now), long - Duration::from_millis(50));
    let short = now + Duration::from_millis(40);
    assert_eq!(withdraw_at(short, now), now + Duration::from_millis(30));
    assert_eq!(withdraw_at(now, now), now);
    assert_eq!(
        catch_up_pause(Duration::from_millis(8)),
        Duration::from_millis(8)
    );
    assert_eq!(
        catch_up_pause(Duration::from_secs(5)),
        Duration::from_secs(1)
    );
}

#[test]
fn the_owner_is_given_less_than_the_callers_whole_deadline() {
    assert_eq!(
        owner_budget(Duration::from_secs(30)),
        Duration::from_millis(29_750)
    );
    assert_eq!(
        owner_budget(Duration::from_secs(1)),
        Duration::from_millis(800)
    );
    assert_eq!(
        owner_budget(Duration::from_millis(100)),
        Duration::from_millis(80)
    );
    assert_eq!(owner_budget(Duration::ZERO), Duration::ZERO);
}

#[test]
fn background_work_without_room_waits_unless_it_has_aged() {
    let mut queue = ClassQueue::new(&CapacityRules::default());
    let t0 = Instant::now();
    queue.push(B, t0, "bulk-1");
    queue.push(B, t0 + Duration::from_secs(5), "bulk-2");
    assert!(queue.pop(t0 + Duration::from_secs(6), false).is_none());
    let aged = t0 + Duration::from_secs(10);
    assert_eq!(queue.pop(aged, false).map(|(_, item)| item), Some("bulk-1"));
    assert!(queue.pop(aged, false).is_none());
    assert_eq!(queue.pop(aged, true).map(|(_, item)| item), Some("bulk-2"));
}

#[test]
fn background_work_from_every_caller_together_is_bounded() {
    let rules = CapacityRules {
        background_in_flight: 2,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    gate.arrive(&"bulk-1", B, later(now), now).unwrap();
    gate.arrive(&"bulk-2", B, later(now), now).unwrap();
    assert_eq!(
        gate.arrive(&"bulk-3", B, later(now), now).unwrap_err().why,
        Refused::BackgroundFull
    );
    // Apps' writes are not held back by it.
    gate.arrive(&"app", I, later(now), now).unwrap();
    gate.dequeued(B);
    gate.finished(&"bulk-1", B);
    gate.arrive(&"bulk-3", B, later(now), now).unwrap();
}

#[test]
fn background_work_is_held_to_its_share_only_while_interactive_writes_are_about() {
    let mut gate = Gate::new(CapacityRules {
        per_node: 0,
        ..CapacityRules::default()
    });
    let t0 = Instant::now();
    let bulk: Vec<String> = (0..40).map(|n| format!("bulk-{n}")).collect();
    // Alone, background work is held only by each app's cap: 40 apps, 40 writes.
    for name in &bulk {
        gate.arrive(&("node-b", name.as_str()), B, later(t0), t0)
            .unwrap();
    }
    for name in &bulk {
        gate.dequeued(B);
        gate.finished(&("node-b", name.as_str()), B);
    }
    // An interactive write arrives: the owner now holds 16 background writes at most.
    gate.arrive(&("node-a", "app"), I, later(t0), t0).unwrap();
    let refused: Vec<Refused> = bulk
        .iter()
        .filter_map(|name| {
            gate.arrive(&("node-b", name.as_str()), B, later(t0), t0)
                .err()
                .map(|r| r.why)
        })
        .collect();
    assert_eq!(refused.len(), 40 - BACKGROUND_BESIDE_INTERACTIVE as usize);
    assert!(refused.iter().all(|why| *why == Refused::BackgroundFull));
    // Interactive writes are not held back by it.
    gate.arrive(&("node-a", "app-2"), I, later(t0), t0).unwrap();
    // The interactive writes answered, the bound lingers a moment, then lifts.
    for app in ["app", "app-2"] {
        gate.dequeued(I);
        gate.finished(&("node-a", app), I);
    }
    let soon = t0 + INTERACTIVE_LINGERS / 2;
    assert_eq!(
        gate.arrive(&("node-c", "late"), B, later(soon), soon)
            .unwrap_err()
            .why,
        Refused::BackgroundFull
    );
    let after = t0 + INTERACTIVE_LINGERS;
    gate.arrive(&("node-c", "late"), B, later(after), after)
        .unwrap();
    // Rules off: no class, no such bound.
    let mut off = Gate::new(CapacityRules {
        enabled: false,
        ..CapacityRules::default()
    });
    off.arrive(&("node-a", "app"), I, later(t0), t0).unwrap();
    for name in &bulk {
        off.arrive(&("node-b", name.as_str()), B, later(t0), t0)
            .unwrap();
    }
}

#[test]
fn an_app_that_renames_itself_for_each_write_is_held_to_its_nodes_cap() {
    let names: Vec<String> = (1..=50).map(|n| format!("greedy-{n}")).collect();
    let mut gate = Gate::new(CapacityRules::default());
    let now = Instant::now();
    let refused: Vec<Refused> = names
        .iter()
        .filter_map(|name| {
            let caller = ("node-a", name.as_str());
            gate.arrive(&caller, I, later(now), now)
                .err()
                .map(|r| r.why)
        })
        .collect();
    // 50 names buy the node its 16 places, as 50 writes under one name buy the app its 4.
    assert_eq!(refused.len(), 50 - 16);
    assert!(
        refused.iter().all(|why| *why == Refused::NodeCap),
        "{refused:?}"
    );
    let answer = Refusal {
        why: Refused::NodeCap,
        retry_after: BUSY_RETRY,
    }
    .answer();
    assert_eq!(answer.code, RefusalCode::Busy);
    assert_eq!(answer.reason.as_deref(), Some("node_cap"));
    // Another node is not held back; one write of node-a answered frees one place for any of
    // its apps.
    gate.arrive(&("node-b", "greedy-1"), I, later(now), now)
        .unwrap();
    gate.dequeued(I);
    gate.finished(&("node-a", "greedy-3"), I);
    gate.arrive(&("node-a", "greedy-51"), I, later(now), now)
        .unwrap();
    assert_eq!(
        gate.arrive(&("node-a", "greedy-52"), I, later(now), now)
            .unwrap_err()
            .why,
        Refused::NodeCap
    );
}

/// One write of `app` on `node` arriving at `at` and, if admitted, answered at once.
fn one_write(
    gate: &mut Gate<(&'static str, String)>,
    node: &'static str,
    app: &str,
    at: Instant,
) -> Result<(), Refusal> {
    let caller = (node, app.to_string());
    let arrived = gate.arrive(&caller, I, later(at), at);
    if arrived.is_ok() {
        gate.dequeued(I);
        gate.finished(&caller, I);
    }
    arrived
}

#[test]
fn the_node_rate_limit_holds_every_app_of_a_node_together() {
    let rules = CapacityRules {
        rate_per_minute: 60,
        rate_burst: 60,
        node_rate_per_minute: 120,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    // A new name per write: each app's own budget is untouched, the node's is spent at 120.
    for n in 0..120 {
        one_write(&mut gate, "node-a", &format!("app-{n}"), now).unwrap();
    }
    let refused = one_write(&mut gate, "node-a", "app-120", now).unwrap_err();
    assert_eq!(refused.why, Refused::NodeRateLimited);
    assert_eq!(refused.retry_after, Duration::from_millis(500));
    assert_eq!(refused.answer().code, RefusalCode::RateLimited);
    // Another node has its own budget; an app's own limit still holds within its node's.
    for _ in 0..60 {
        one_write(&mut gate, "node-b", "one", now).unwrap();
    }
    assert_eq!(
        one_write(&mut gate, "node-b", "one", now).unwrap_err().why,
        Refused::RateLimited
    );
    // A write refused busy at its start gives its node's spending back too.
    let then = now + Duration::from_millis(500);
    let caller = ("node-a", "late".to_string());
    gate.arrive(&caller, I, later(then), then).unwrap();
    gate.dequeued(I);
    gate.refund(&caller);
    gate.finished(&caller, I);
    one_write(&mut gate, "node-a", "again", then).unwrap();
    assert_eq!(
        one_write(&mut gate, "node-a", "more", then)
            .unwrap_err()
            .why,
        Refused::NodeRateLimited
    );
}

#[test]
fn by_default_an_app_writing_one_after_another_is_never_rate_limited() {
    let mut gate = Gate::new(CapacityRules::default());
    let now = Instant::now();
    let app = ("me", "importer");
    // 100,000 writes in one instant, each answered before the next: nothing but the caps and
    // the queue may refuse one, and one at a time meets neither.
    for n in 0..100_000 {
        assert!(gate.arrive(&app, I, later(now), now).is_ok(), "write {n}");
        gate.dequeued(I);
        gate.finished(&app, I);
    }
}

#[test]
fn the_wait_bound_holds_interactive_writes_to_what_the_owner_answers_in_its_wait() {
    // Thousands of apps with one write each: no cap of a caller or a node holds them.
    let rules = CapacityRules {
        per_node: 0,
        ..CapacityRules::default()
    };
    let mut gate = Gate::new(rules);
    let now = Instant::now();
    // Before any batch ran there is no pace: the floor holds.
    assert_eq!(gate.interactive_bound(), Some(WAIT_BOUND_FLOOR));
    // Batches of 300 writes in 10 ms: 30,000 writes a second, 300 of them in the 10 ms wait.
    for _ in 0..64 {
        gate.batch_ran(300, Duration::from_millis(10));
    }
    assert_eq!(gate.interactive_bound(), Some(300));
    for app in 0..300usize {
        gate.arrive(&app, I, later(now), now).unwrap();
    }
    let refused = gate.arrive(&300usize, I, later(now), now).unwrap_err();
    assert_eq!(refused.why, Refused::Saturated);
    assert_eq!(refused.answer().code, RefusalCode::Busy);
    assert_eq!(refused.answer().reason.as_deref(), Some("saturated"));
    // Background work is not held by it (its own bound and the aging are its rules)...
    gate.arrive(&301usize, B, later(now), now).unwrap();
    // ...and an interactive write finished makes room for one more.
    gate.dequeued(I);
    gate.finished(&0usize, I);
    gate.arrive(&302usize, I, later(now), now).unwrap();
    // A slower owner holds fewer, never fewer than the floor.
    for _ in 0..64 {
        gate.batch_ran(10, Duration::from_millis(10));
    }
    assert_eq!(gate.interactive_bound(), Some(WAIT_BOUND_FLOOR));
}

#[test]
fn a_batch_that_took_no_time_teaches_the_pace_nothing() {
    let mut pace = BatchPace::default();
    // A virtual clock that stood still while the batch ran, or a batch answered unrun.
    pace.observe(200, Duration::ZERO);
    pace.observe(200, PACE_GRAIN / 2);
    assert_eq!(pace.writes_per_second(), 0.0);
    assert_eq!(pace.held_within(INTERACTIVE_WAIT), WAIT_BOUND_FLOOR);
    pace.observe(100, Duration::from_millis(10));
    assert_eq!(pace.writes_per_second(), 10_000.0);
}

#[test]
fn a_person_writing_never_meets_the_wait_bound_however_slow_the_owner() {
    let mut gate = Gate::new(CapacityRules::default());
    let now = Instant::now();
    // A very slow owner: one write a second.
    for _ in 0..64 {
        gate.batch_ran(1, Duration::from_secs(1));
    }
    // Six machines with four apps each at their whole cap, 96 writes: all admitted.
    for node in 0..6usize {
        for app in ["notes", "photos", "mail", "tasks"] {
            for _ in 0..4 {
                gate.arrive(&(node, app), I, later(now), now).unwrap();
            }
        }
    }
}

#[test]
fn with_no_wait_set_or_the_rules_off_there_is_no_wait_bound() {
    for rules in [
        CapacityRules {
            interactive_wait: Duration::ZERO,
            per_node: 0,
            ..CapacityRules::default()
        },
        CapacityRules {
            enabled: false,
            ..CapacityRules::default()
        },
    ] {
        let mut gate = Gate::new(rules);
        let now = Instant::now();
        assert_eq!(gate.interactive_bound(), None);
        for app in 0..1000usize {
            gate.arrive(&app, I, later(now), now).unwrap();
        }
    }
}
