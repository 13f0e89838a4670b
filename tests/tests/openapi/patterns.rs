//! The document's string patterns against the parsers the server reads those strings with: for
//! each documented form, every candidate the document's schema allows the parser takes, and every
//! one it refuses the parser refuses. Candidates are valid values, near misses, and every string
//! one to three edits away from them (edits drawn from the characters each form is made of, and
//! a few it must refuse), where a pattern and a parser part ways if they do.

use std::str::FromStr;

use ferry_core::rng::Rng;
use ferry_gateway::names;
use ferry_kit::contract::{parse_if_match, parse_timeout, parse_wait};
use ferry_peer::routes::Route;
use ferry_peer::wire::RequestId;
use ferry_peer::NodeId;
use serde_json::{json, Value};

/// One documented string form: where its schema is, the parser, and what to start from.
struct Form {
    what: &'static str,
    schema: Value,
    accepts: fn(&str) -> bool,
    seeds: Vec<String>,
    alphabet: &'static str,
}

/// Random edit walks from each seed, on top of every single edit.
const WALKS_PER_SEED: usize = 400;

fn forms(doc: &Value) -> Vec<Form> {
    let parameter = |name: &str| doc["components"]["parameters"][name]["schema"].clone();
    let property =
        |schema: &str, name: &str| doc["components"]["schemas"][schema]["properties"][name].clone();
    let settle = |name: &str| {
        doc["paths"]["/v1/calls/{id}"]["get"]["parameters"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == name))
            .map(|p| p["schema"].clone())
            .unwrap_or_else(|| panic!("settleCall has no parameter {name}"))
    };
    let owned = |seeds: &[&str]| seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut timeouts = owned(&[
        "600",
        "0600.000",
        "0.5",
        ".5",
        "5.",
        "599.9999999999",
        "1",
        "0.0000000001",
        "0",
        "00",
        ".",
        "601",
        "1000",
        "600.0000000001",
        "60",
        "100",
        // Where a float's rounding would part ways with the pattern.
        "600.00000000000000000001",
    ]);
    timeouts.push(format!("0.{}1", "0".repeat(400)));
    let node = NodeId::from_str(&"ab".repeat(32)).unwrap().to_string();
    let id = uuid::Uuid::now_v7().to_string();
    let name_seeds = |max: usize| {
        let mut seeds = owned(&["notes", ".", "..", ".a.", "-", "a_b-c.d", ""]);
        seeds.push("a".repeat(max));
        seeds.push("a".repeat(max + 1));
        seeds
    };
    // Vault names, app names and labels: one form, checked by its own function, of `max` bytes.
    let name = |what, schema, accepts: fn(&str) -> bool, max| Form {
        what,
        schema,
        accepts,
        seeds: name_seeds(max),
        alphabet: "aZ09._-/ é",
    };
    let vault = |what, schema| name(what, schema, |s| names::VaultName::parse(s).is_ok(), 128);
    let label = |what, schema| name(what, schema, |s| names::Label::parse(s).is_ok(), 64);
    vec![
        Form {
            what: "X-Ferry-Timeout",
            schema: parameter("Timeout"),
            accepts: |s| parse_timeout(s).is_some(),
            seeds: timeouts.clone(),
            alphabet: "0123456789.+-e ",
        },
        Form {
            what: "the settle's wait",
            schema: settle("wait"),
            accepts: |s| parse_wait(s).is_some(),
            seeds: timeouts,
            alphabet: "0123456789.+-e ",
        },
        Form {
            what: "If-Match",
            schema: parameter("IfMatch"),
            accepts: |s| parse_if_match(s).is_some(),
            seeds: owned(&[
                "7",
                "\"7\"",
                "0",
                "18446744073709551615",
                "\"018446744073709551615\"",
                "18446744073709551616",
                "18446744073709551605",
                "99999999999999999999",
                "",
            ]),
            alphabet: "0123456789\"+- W/",
        },
        Form {
            what: "X-Ferry-Request-Id (its form; its date is the server's to judge)",
            schema: parameter("RequestId"),
            accepts: |s| RequestId::parse(s).is_ok(),
            seeds: vec![id.clone(), id.to_uppercase(), format!("{{{id}}}")],
            alphabet: "0123456789abcdefABCDEF-7g{} ",
        },
        Form {
            what: "the settle's id",
            schema: settle("id"),
            accepts: |s| RequestId::parse(s).is_ok(),
            seeds: vec![id.clone()],
            alphabet: "0123456789abcdef-7g",
        },
        name(
            "X-Ferry-App",
            parameter("App"),
            |s| names::AppName::parse(s).is_ok(),
            64,
        ),
        vault("the vault in a path", parameter("Vault")),
        vault("the settle's vault", settle("vault")),
        vault("a new vault's name", property("CreateVault", "name")),
        vault("a followed vault's name", property("FollowVault", "name")),
        label("a trusted peer's label", property("TrustRequest", "label")),
        label(
            "an untrusted peer's label",
            property("UntrustRequest", "label"),
        ),
        label("a followed vault's owner", property("FollowVault", "owner")),
        Form {
            what: "a trusted peer's node id",
            schema: property("TrustRequest", "node_id"),
            accepts: |s| NodeId::from_str(s).is_ok(),
            seeds: vec![
                node.clone(),
                node.to_uppercase(),
                format!(" \t{node}\r\n\x0c"),
                format!("\u{a0}{node}"),
                node[1..].to_string(),
            ],
            alphabet: "0123456789abcdefABCDEFg \t\n\r\x0b\x0c\u{a0}\u{85}",
        },
        Form {
            what: "a route of a trust request",
            schema: property("TrustRequest", "routes")["items"].clone(),
            accepts: |s| Route::parse(s).is_ok(),
            seeds: owned(&[
                "10.0.0.1:7420",
                "255.255.255.255:65535",
                "1.2.3.4:000000080",
                "01.2.3.4:5",
                " 1.2.3.4:5 , lan\n",
                "100.64.0.1:1,tailnet",
                "[::1]:80",
                "[::]:0,thunderbolt",
                "[fe80::1%4294967295]:65535",
                "[fe80::1%4294967296]:1",
                "[::ffff:1.2.3.4]:1",
                "[1:2:3:4:5:6:1.2.3.4]:1",
                "[1:2:3:4:5:6:7:8]:1",
                "[1:2:3:4:5:6:7::]:1",
                "[::1:2:3:4:5:6:7]:1",
                "[1::2:3:4:5:6:7]:1",
                "[a:b::c:d]:1",
                "[00000::1]:1",
                "host:7420",
            ]),
            alphabet: "0123456789abcdefA:.[]%, \tlanx\u{a0}",
        },
    ]
}

/// Every string one edit (a character left out, put in, or changed) away from `seed`.
fn single_edits(seed: &str, alphabet: &[char]) -> Vec<String> {
    let chars: Vec<char> = seed.chars().collect();
    let mut out = Vec::new();
    for at in 0..=chars.len() {
        for &c in alphabet {
            let mut inserted = chars.clone();
            inserted.insert(at, c);
            out.push(inserted.into_iter().collect());
            if at < chars.len() {
                let mut changed = chars.clone();
                changed[at] = c;
                out.push(changed.into_iter().collect());
            }
        }
        if at < chars.len() {
            let mut removed = chars.clone();
            removed.remove(at);
            out.push(removed.into_iter().collect());
        }
    }
    out
}

/// `seed` after one to three random edits.
fn walk(seed: &str, alphabet: &[char], rng: &mut Rng) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for _ in 0..=rng.below(3) {
        let at = rng.below(chars.len() as u64 + 1) as usize;
        let c = alphabet[rng.below(alphabet.len() as u64) as usize];
        match rng.below(3) {
            0 => chars.insert(at, c),
            1 if at < chars.len() => chars[at] = c,
            _ if at < chars.len() => {
                chars.remove(at);
            }
            _ => chars.push(c),
        }
    }
    chars.into_iter().collect()
}

#[test]
fn the_documents_patterns_take_exactly_what_the_servers_parsers_take() {
    let doc = super::Contract::load().doc;
    let mut rng = Rng::new(43);
    let mut disagreements = Vec::new();
    let mut checked = 0usize;
    for form in forms(&doc) {
        assert!(
            form.schema["type"] == "string",
            "{}: no string schema in the document: {}",
            form.what,
            form.schema
        );
        let validator = jsonschema::validator_for(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "allOf": [form.schema],
        }))
        .unwrap_or_else(|err| panic!("{}: the schema does not compile: {err}", form.what));
        let alphabet: Vec<char> = form.alphabet.chars().collect();
        let mut candidates = Vec::new();
        for seed in &form.seeds {
            candidates.push(seed.clone());
            candidates.extend(single_edits(seed, &alphabet));
            candidates.extend((0..WALKS_PER_SEED).map(|_| walk(seed, &alphabet, &mut rng)));
        }
        let mut allowed = 0;
        for candidate in &candidates {
            let documented = validator.is_valid(&Value::String(candidate.clone()));
            let taken = (form.accepts)(candidate);
            allowed += usize::from(documented);
            if documented != taken {
                disagreements.push(format!(
                    "{}: {candidate:?} is {} by the document but {} by the server",
                    form.what,
                    if documented { "allowed" } else { "refused" },
                    if taken { "taken" } else { "refused" },
                ));
            }
        }
        // Both sides of the line were tried (and a schema with no line at all is reported).
        if allowed == 0 || allowed == candidates.len() {
            disagreements.push(format!(
                "{}: the document allows {allowed} of {} candidates",
                form.what,
                candidates.len()
            ));
        }
        checked += candidates.len();
    }
    assert!(
        disagreements.is_empty(),
        "{} of {checked} strings are read differently by the document and the server:\n  {}",
        disagreements.len(),
        disagreements
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    eprintln!("{checked} strings read alike by docs/openapi.json and the server's parsers");
}
