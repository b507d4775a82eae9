//! A real Prometheus server (Debian's `prometheus` package) for the metrics tests: started on
//! a free loopback port with a private data directory, scraping one target every second, and
//! queried through its HTTP API. Killed and removed on drop.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::TempDir;

pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const PROMTOOL: &str = "/usr/bin/promtool";

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    _dir: TempDir,
}

/// A loopback port nobody listens on now.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

fn installed(path: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: `cargo xtask test` installs Debian's prometheus package"
    );
}

impl Prometheus {
    /// Starts a server scraping `target` (job "spacetime") every second; waits until ready.
    pub fn scraping(target: SocketAddr) -> Prometheus {
        installed(PROMETHEUS);
        let dir = TempDir::new("prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: spacetime\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let addr = free_port();
        let log = std::fs::File::create(dir.path().join("log")).expect("create log");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {PROMETHEUS}: {e}"));
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        p.wait_until("ready", Duration::from_secs(60), || {
            get(addr, "/-/ready").is_some_and(|(code, _)| code == 200)
        });
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("log")).unwrap_or_default()
    }

    /// Polls `done` every 100 ms until it holds; panics with the server's log after `limit`.
    pub fn wait_until(&self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let limit = crate::hang_guard(limit);
        let reached = crate::poll::poll(limit, Duration::from_millis(100), || done().then_some(()));
        assert!(
            reached.is_some(),
            "Prometheus: {what} not reached within {limit:?}\nlog:\n{}",
            self.log()
        );
    }

    /// An instant query: the result vector as (labels, value).
    pub fn query(&self, q: &str) -> Vec<(Value, f64)> {
        let path = format!("/api/v1/query?query={}", percent_encode(q));
        let (code, body) = get(self.addr, &path)
            .unwrap_or_else(|| panic!("Prometheus did not answer {q:?}\n{}", self.log()));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("query {q:?}: not JSON ({e}): {body}"));
        assert_eq!(code, 200, "query {q:?}: {body}");
        assert_eq!(v["status"], "success", "query {q:?}: {body}");
        v["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("query {q:?}: no result array: {body}"))
            .iter()
            .map(|r| {
                let value = r["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("query {q:?}: bad value in {r}"));
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The value of a query that yields one series, if it yields exactly one.
    pub fn scalar(&self, q: &str) -> Option<f64> {
        match self.query(q).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `promtool check metrics` on an exposition; returns (success, what it printed).
pub fn promtool_check(exposition: &str) -> (bool, String) {
    installed(PROMTOOL);
    let mut c = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start promtool: {e}"));
    c.stdin
        .take()
        .expect("piped stdin")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = c.wait_with_output().expect("wait for promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// GET over HTTP/1.0; `None` when nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
