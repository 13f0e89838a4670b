//! The README's short tour, read from README.md itself and run against the built `ferry`, so
//! the tour cannot drift from the CLI unnoticed.
//!
//! Of the shell it understands only what the tour uses, and fails on anything else rather
//! than guess: the `ferry() { ... }` function (the binary under test stands in for it), one
//! command a line with `\` continuations, `;` between commands, a trailing `&` (a `ferry serve`
//! in the background, waited on until it listens), `'...'` and `"..."` quoting, and `$(...)`
//! of `ferry` or `cat`. After a `#` is what the command prints, `...` standing for the rest
//! (a JSON object: the fields shown, with these values), and a note in brackets after two
//! spaces or alone. `/tmp/NAME` becomes a home of the test's own; a `--listen` address becomes
//! a port the kernel picks, and the same address given to `--addr` that gateway's real one.
//! `ferry ui`'s browser is a stand-in that records the page it is handed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use ferry_harness::{wait_for, Gateway, STOP_BOUND};

/// How long one step of the tour may take (a `watch` waits for its change; the rest is quick).
const STEP_BOUND: Duration = Duration::from_secs(30);

/// One command line of the tour as the README writes it, continuation lines joined.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub command: String,
    /// What the README says it prints, if it says.
    pub prints: Option<String>,
}

/// The indented command lines of the README's section under `heading` (up to the next `## `).
pub fn steps(readme: &str, heading: &str) -> Vec<Step> {
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no section headed {heading:?}"));
    let section = &readme[start + heading.len() + 2..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut steps = Vec::new();
    let mut pending = String::new();
    for line in section.lines() {
        let Some(code) = line.strip_prefix("    ") else {
            assert!(
                pending.is_empty(),
                "a `\\` continuation runs out of its block"
            );
            continue;
        };
        // A continuation line joins the one before it with a single space.
        let code = if pending.is_empty() {
            code
        } else {
            code.trim_start()
        };
        match code.trim_end().strip_suffix('\\') {
            Some(more) => {
                pending.push_str(more.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(code);
                let (command, prints) = split_comment(&pending);
                steps.push(Step { command, prints });
                pending.clear();
            }
        }
    }
    steps
}

/// Splits a line into its command and what its comment says the command prints.
fn split_comment(line: &str) -> (String, Option<String>) {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            (None, '#') if previous.is_whitespace() => {
                let comment = line[at + 1..].trim();
                let prints = if comment.starts_with('(') {
                    None
                } else {
                    // A note follows the output after two spaces.
                    comment.split("  ").next().map(|s| s.trim().to_string())
                };
                return (line[..at].trim().to_string(), prints);
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim().to_string(), None)
}

/// The commands of a line, split at `;`, each with whether it ends in `&`.
pub fn statements(command: &str) -> Vec<(String, bool)> {
    let mut all = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    let mut depth = 0_u32;
    for c in command.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            (_, '(') => depth += 1,
            (_, ')') => depth = depth.saturating_sub(1),
            (None, ';') if depth == 0 => {
                all.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    all.push(current);
    all.into_iter()
        .map(|statement| {
            let statement = statement.trim();
            match statement.strip_suffix('&') {
                Some(rest) => (rest.trim().to_string(), true),
                None => (statement.to_string(), false),
            }
        })
        .filter(|(statement, _)| !statement.is_empty())
        .collect()
}

/// The words of one command, quotes removed, each `$(...)` replaced by what `substitute` makes
/// of the command inside.
pub fn words(statement: &str, substitute: &mut dyn FnMut(&str) -> String) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = statement.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(open), c) if c == open => quote = None,
            (None | Some('"'), '$') if chars.peek() == Some(&'(') => {
                chars.next();
                let mut inner = String::new();
                let mut depth = 1;
                for c in chars.by_ref() {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    if depth == 0 {
                        break;
                    }
                    inner.push(c);
                }
                assert_eq!(depth, 0, "an unclosed $( in {statement:?}");
                word.get_or_insert_with(String::new)
                    .push_str(&substitute(&inner));
            }
            (None | Some('"'), '$' | '`' | '\\') | (None, '|' | '>' | '<' | '&' | '*') => {
                panic!(
                    "the tour test does not understand {c:?} in {statement:?}: teach it \
                     (tests/tests/readme_tour) or write the tour without it"
                )
            }
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(quote.is_none(), "an unclosed quote in {statement:?}");
    words.extend(word);
    words
}

/// Whether `printed` is what the README says: `expected` with `...` standing for anything, or,
/// for a JSON object, the fields shown with these values.
pub fn check_prints(expected: &str, printed: &str) -> Result<(), String> {
    let printed = printed.trim_end();
    if expected.starts_with('{') {
        let shown: Value = serde_json::from_str(&expected.replace(", ...", ""))
            .map_err(|err| format!("the README's {expected:?} is not JSON with `, ...`: {err}"))?;
        let got: Value = serde_json::from_str(printed)
            .map_err(|err| format!("printed {printed:?}, not JSON ({err})"))?;
        let missing: Vec<String> = shown
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(field, value)| got.get(field.as_str()) != Some(value))
            .map(|(field, value)| format!("{field}: {value}"))
            .collect();
        return match missing.is_empty() {
            true => Ok(()),
            false => Err(format!("printed {got} without {}", missing.join(", "))),
        };
    }
    let parts: Vec<&str> = expected.split("...").collect();
    let matched = match parts.as_slice() {
        [first, middle @ .., last] if parts.len() > 1 => {
            printed.len() >= first.len() + last.len()
                && printed.starts_with(first)
                && printed.ends_with(last)
                && {
                    let mut left = &printed[first.len()..printed.len() - last.len()];
                    middle.iter().all(|part| match left.find(part) {
                        Some(at) => {
                            left = &left[at + part.len()..];
                            true
                        }
                        None => false,
                    })
                }
        }
        _ => printed == expected,
    };
    match matched {
        true => Ok(()),
        false => Err(format!("printed {printed:?}, not {expected:?}")),
    }
}

/// Runs the tour of `readme` (its section headed `## A short tour`) with `bin` as `ferry`.
pub fn run(readme: &str, bin: &str) {
    let steps = steps(readme, "## A short tour");
    assert!(
        steps.len() >= 3,
        "the README's tour has only {} command lines: {steps:?}",
        steps.len()
    );
    let mut tour = Tour::new(bin);
    for step in &steps {
        tour.step(step);
    }
    tour.finish();
}

/// What the tour has made so far.
struct Tour {
    bin: PathBuf,
    root: tempfile::TempDir,
    /// A `PATH` whose `xdg-open` records what it was handed, so `ferry ui` opens no browser.
    path: String,
    opened: PathBuf,
    /// Whether the README has defined its `ferry` function.
    defined: bool,
    /// The README's `--listen` addresses, by the home they were given to.
    listens: BTreeMap<String, String>,
    /// The gateways running, by home name.
    gateways: BTreeMap<String, Gateway>,
}

impl Tour {
    fn new(bin: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let browser = root.path().join("browser");
        std::fs::create_dir(&browser).unwrap();
        let opened = root.path().join("opened");
        let opener = browser.join("xdg-open");
        std::fs::write(
            &opener,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\n",
                opened.display()
            ),
        )
        .unwrap();
        let mut mode = std::fs::metadata(&opener).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
        std::fs::set_permissions(&opener, mode).unwrap();
        let path = match std::env::var("PATH") {
            Ok(path) => format!("{}:{path}", browser.display()),
            Err(_) => browser.display().to_string(),
        };
        Self {
            bin: PathBuf::from(bin),
            root,
            path,
            opened,
            defined: false,
            listens: BTreeMap::new(),
            gateways: BTreeMap::new(),
        }
    }

    fn step(&mut self, step: &Step) {
        if step.command.starts_with("ferry()") {
            assert!(
                step.command.contains("--bin ferry --") && step.command.contains("\"$@\""),
                "the tour's `ferry` is not the gateway's binary: {:?}",
                step.command
            );
            self.defined = true;
            return;
        }
        let statements = statements(&step.command);
        let last = statements.len().saturating_sub(1);
        for (at, (statement, background)) in statements.iter().enumerate() {
            let printed = self.statement(statement, *background);
            if let (Some(expected), true) = (&step.prints, at == last) {
                if let Err(why) = check_prints(expected, &printed) {
                    panic!("the README's `{statement}`: {why}");
                }
            }
        }
    }

    /// Runs one command; returns what it printed.
    fn statement(&mut self, statement: &str, background: bool) -> String {
        let words = words(statement, &mut |inner| {
            let printed = self.statement(inner, false);
            printed.trim_end_matches('\n').to_string()
        });
        let (program, args) = words
            .split_first()
            .unwrap_or_else(|| panic!("an empty command in the tour: {statement:?}"));
        match (program.as_str(), background) {
            ("ferry", _) => {
                assert!(self.defined, "the tour runs `ferry` before defining it");
                self.ferry(args, background)
            }
            ("cat", false) => match args {
                [file] => std::fs::read_to_string(self.path_of(file))
                    .unwrap_or_else(|err| panic!("`{statement}` in the tour: {err}")),
                _ => panic!("the tour's `{statement}`: cat of one file only"),
            },
            ("curl", false) => self.curl(args),
            _ => panic!("the tour test does not know `{program}` (in `{statement}`)"),
        }
    }

    /// `/tmp/NAME...` as a path under this tour's own directory.
    fn path_of(&self, word: &str) -> String {
        match word.strip_prefix("/tmp/") {
            Some(rest) => self.root.path().join(rest).display().to_string(),
            None => word.to_string(),
        }
    }

    /// The home name of `/tmp/NAME`.
    fn home_name(word: &str) -> String {
        let name = word.strip_prefix("/tmp/").unwrap_or_else(|| {
            panic!("the tour's homes are /tmp/NAME, so the test can give them its own; {word:?}")
        });
        assert!(
            !name.is_empty() && !name.contains('/'),
            "a home of the tour: {word:?}"
        );
        name.to_string()
    }

    fn ferry(&mut self, args: &[String], background: bool) -> String {
        let mut home = None;
        let mut subcommand = None;
        let mut mapped = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            mapped.push(self.path_of(arg));
            let Some(value) = (match arg.as_str() {
                "--home" | "--listen" | "--addr" | "--label" | "--api" => args.next(),
                _ => None,
            }) else {
                if !arg.starts_with('-') && subcommand.is_none() {
                    subcommand = Some(arg.clone());
                }
                continue;
            };
            let value = match arg.as_str() {
                "--home" => {
                    home = Some(Self::home_name(value));
                    self.path_of(value)
                }
                "--listen" => {
                    let name = home.clone().expect("--home before --listen in the tour");
                    self.listens.insert(name, value.clone());
                    "127.0.0.1:0".to_string()
                }
                "--addr" => self.quic_of(value),
                _ => value.clone(),
            };
            mapped.push(value);
        }
        let home = home.unwrap_or_else(|| panic!("a tour command without --home: {mapped:?}"));
        let subcommand = subcommand.unwrap_or_default();
        if background {
            assert_eq!(
                subcommand, "serve",
                "only `ferry serve` runs in the background"
            );
            self.serve(&home, &mapped);
            return String::new();
        }
        let output = self.run(self.ferry_command(&mapped));
        assert!(
            output.status.success(),
            "the tour's `ferry {}` failed: {}",
            mapped.join(" "),
            ferry_harness::describe(&output)
        );
        match subcommand.as_str() {
            "stop" => self.stopped(&home),
            "ui" if !mapped.iter().any(|a| a == "--print" || a == "--json") => self.opened(&home),
            _ => {}
        }
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The QUIC address of the gateway the README gave `address` as its `--listen`.
    fn quic_of(&self, address: &str) -> String {
        let name = self
            .listens
            .iter()
            .find(|(_, listen)| *listen == address)
            .map(|(name, _)| name)
            .unwrap_or_else(|| panic!("--addr {address}: no gateway of the tour listens there"));
        self.gateways
            .get(name)
            .unwrap_or_else(|| panic!("--addr {address}: gateway {name} is not running"))
            .quic
            .clone()
    }

    fn ferry_command(&self, args: &[String]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("PATH", &self.path)
            // `ferry ui`'s handover page goes here, removed with the tour's directory.
            .env("XDG_RUNTIME_DIR", self.root.path())
            .env_remove("FERRY_HOME")
            .env_remove("FERRY_DANGEROUS_FAULT")
            .stdin(Stdio::null());
        command
    }

    fn serve(&mut self, home: &str, args: &[String]) {
        let dir = self.root.path().join(home);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let label = args
            .iter()
            .position(|a| a == "--label")
            .and_then(|at| args.get(at + 1))
            .map_or(home, String::as_str);
        let child = self
            .ferry_command(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let gateway = Gateway::adopt(&self.bin, child, label, &dir);
        self.gateways.insert(home.to_string(), gateway);
    }

    /// After the tour's `ferry stop` on `home`: its gateway exits, with 0.
    fn stopped(&mut self, home: &str) {
        let mut gateway = self
            .gateways
            .remove(home)
            .unwrap_or_else(|| panic!("the tour stops {home}, which it did not start"));
        let exit = gateway.wait_exit(STOP_BOUND);
        assert_eq!(
            exit,
            Some(0),
            "{home} after `ferry stop`: {}",
            gateway.log()
        );
    }

    /// After the tour's `ferry ui` on `home`: the browser was handed a page that leads to that
    /// gateway's status page with a one-time code.
    fn opened(&self, home: &str) {
        let api = &self.gateways[home].api;
        let opened = std::fs::read_to_string(&self.opened).unwrap_or_default();
        let page = opened
            .lines()
            .last()
            .unwrap_or_else(|| panic!("`ferry ui` on {home} handed nothing to the browser"));
        let page = std::fs::read_to_string(page)
            .unwrap_or_else(|err| panic!("the page `ferry ui` handed over, {page}: {err}"));
        let link = format!("http://{api}/ui#code=");
        assert!(page.contains(&link), "the page holds no {link}: {page}");
    }

    /// What curl would print for the README's request, sent with reqwest (curl need not be
    /// installed): `-X`, `--data-binary`, `-H` and the URL only.
    fn curl(&self, args: &[String]) -> String {
        let mut method = reqwest::Method::GET;
        let mut body = None;
        let mut headers = Vec::new();
        let mut url = None;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .unwrap_or_else(|| panic!("curl {arg} without a value"))
            };
            match arg.as_str() {
                "-X" => method = value().parse().unwrap(),
                "--data-binary" => body = Some(value().clone()),
                "-H" => {
                    let header = value();
                    let (name, content) = header
                        .split_once(": ")
                        .unwrap_or_else(|| panic!("curl -H {header:?}"));
                    headers.push((name.to_string(), content.to_string()));
                }
                flag if flag.starts_with('-') => panic!("the tour test does not know curl {flag}"),
                _ => url = Some(arg.clone()),
            }
        }
        let url = url.expect("curl without a URL");
        let client = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut request = client.request(method, &url);
        for (name, content) in headers {
            request = request.header(name, content);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request
            .send()
            .unwrap_or_else(|err| panic!("curl {url}: {err}"));
        let status = response.status();
        let text = response.text().unwrap_or_default();
        assert!(status.is_success(), "curl {url}: {status} {text}");
        text
    }

    /// Runs `command` to its end, at most [`STEP_BOUND`].
    fn run(&self, mut command: Command) -> Output {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(Some(child));
        wait_for(
            "a command of the README's tour to finish",
            STEP_BOUND,
            || child.0.as_mut().and_then(|c| c.try_wait().unwrap()),
        );
        child.0.take().unwrap().wait_with_output().unwrap()
    }

    /// The tour stops what it starts.
    fn finish(self) {
        let running: Vec<&String> = self.gateways.keys().collect();
        assert!(
            running.is_empty(),
            "the README's tour leaves {running:?} running: it should stop what it starts"
        );
    }
}

/// A command that did not finish in time is killed rather than left behind.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The README the tour is read from: the repository's, or the file `FERRY_README` names (to
/// show the test failing on a tour that has drifted, in a scratch copy).
pub fn readme_path() -> PathBuf {
    std::env::var_os("FERRY_README").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
        PathBuf::from,
    )
}
