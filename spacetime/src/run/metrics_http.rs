//! A minimal HTTP/1.1 endpoint for scrapes: `GET /metrics` answered with one body, then the
//! connection closed. Hand-written on tokio's `TcpStream` (about 60 lines; an HTTP crate would
//! bring a dozen dependencies for nothing else). Any local user can connect, so connections are
//! capped, each has a time limit, and the caller pauses accepting after an accept() error
//! instead of retrying in a loop (see `Watch::consume`).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::net::TcpStream;

use crate::report::metrics::{expose, Format, Metrics};

/// Connections served at once; more are closed unanswered (and counted).
pub const MAX_CONNECTIONS: usize = 16;
/// Time a connection may take to send its request and read the answer.
const CONNECTION_TIME_LIMIT: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_REQUEST_BYTES: usize = 16 << 10;

/// Counts the connections being served; a slot is held by a [`Slot`].
#[derive(Clone, Default)]
pub struct Slots(Arc<AtomicUsize>);

/// One connection's place among [`MAX_CONNECTIONS`], released on drop.
pub struct Slot(Arc<AtomicUsize>);

impl Slots {
    pub fn take(&self) -> Option<Slot> {
        let mut n = self.0.load(Ordering::Relaxed);
        loop {
            if n >= MAX_CONNECTIONS {
                return None;
            }
            match self
                .0
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(Slot(Arc::clone(&self.0))),
                Err(now) => n = now,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers one request on `conn` from a snapshot of the figures taken when it was accepted.
pub async fn serve(conn: TcpStream, figures: Box<Metrics>, slot: Slot) {
    let _slot = slot;
    let _ = tokio::time::timeout(CONNECTION_TIME_LIMIT, async move {
        let Some(req) = read_head(&conn).await else {
            return;
        };
        let head = String::from_utf8_lossy(&req);
        let mut lines = head.lines();
        let mut words = lines.next().unwrap_or("").split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let accept = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
            .map_or("", |(_, v)| v.trim());
        let format = negotiate(accept);
        let body;
        let (status, ctype, content) = match (method, path) {
            ("GET" | "HEAD", "/metrics" | "/") => {
                body = expose::render(&figures, format);
                ("200 OK", format.content_type(), body.as_str())
            }
            ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found: try /metrics\n"),
            _ => (
                "405 Method Not Allowed",
                "text/plain",
                "only GET is supported\n",
            ),
        };
        let mut resp = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            content.len()
        );
        if method != "HEAD" {
            resp.push_str(content);
        }
        write_all(&conn, resp.as_bytes()).await;
        // Dropping the stream closes the connection.
    })
    .await;
}

async fn read_head(conn: &TcpStream) -> Option<Vec<u8>> {
    let mut req = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        conn.readable().await.ok()?;
        match conn.try_read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => req.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
        if req.len() > MAX_REQUEST_BYTES {
            break;
        }
    }
    Some(req)
}

async fn write_all(conn: &TcpStream, mut rest: &[u8]) {
    while !rest.is_empty() {
        if conn.writable().await.is_err() {
            return;
        }
        match conn.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// OpenMetrics when the client names it with a quality at least that of the text format (as
/// Prometheus does); the text format 0.0.4 otherwise, including for `*/*` and no header.
pub fn negotiate(accept: &str) -> Format {
    let mut om = 0.0f32;
    let mut text = 0.0f32;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" => text = text.max(q),
            _ => {}
        }
    }
    if om > 0.0 && om >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_others_text() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(prom), Format::OpenMetrics);
        assert_eq!(negotiate(""), Format::Text);
        assert_eq!(negotiate("*/*"), Format::Text);
        assert_eq!(negotiate("text/plain; version=0.0.4"), Format::Text);
        assert_eq!(
            negotiate("text/plain;q=1, application/openmetrics-text;q=0.2"),
            Format::Text
        );
        assert_eq!(negotiate("application/openmetrics-text; q=0"), Format::Text);
    }

    #[test]
    fn slots_are_capped_and_given_back() {
        let slots = Slots::default();
        let held: Vec<Slot> = (0..MAX_CONNECTIONS)
            .map(|i| slots.take().unwrap_or_else(|| panic!("slot {i} refused")))
            .collect();
        assert!(slots.take().is_none(), "a slot past the cap was given");
        drop(held);
        assert!(slots.take().is_some(), "slots were not given back");
    }
}
