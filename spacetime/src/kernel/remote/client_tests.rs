//! Unit tests of [`super`]: what a client makes of an agent that goes away.

use super::*;

/// Serves one client at `path` as an agent that stops: the hello read and welcomed, then
/// (with `unread`) the client's next request left unread, then the reason it stops sent and
/// the connection closed.
fn stopping_agent(path: &std::path::Path, unread: bool) -> std::thread::JoinHandle<()> {
    let listener = sock::listen(path).expect("listen");
    std::thread::spawn(move || {
        // The listener is non-blocking: wait for the client's connection, then take it.
        let fd = loop {
            sock::wait_readable(listener.as_fd(), 10_000);
            if let Some(fd) = sock::accept(listener.as_fd()).expect("accept") {
                break fd;
            }
        };
        let mut buf = vec![0; proto::MAX_MESSAGE + 1];
        sock::wait_readable(fd.as_fd(), 10_000);
        sock::recv(fd.as_fd(), &mut buf, false).expect("the hello");
        let welcome = Msg::Welcome(Welcome::default()).encode();
        sock::send(fd.as_fd(), &welcome, None).expect("welcome");
        if unread {
            sock::wait_readable(fd.as_fd(), 10_000);
        }
        let reason = b"SIGTERM: the agent stops".to_vec();
        sock::send(fd.as_fd(), &Msg::Shutdown { reason }.encode(), None).expect("shutdown");
        // Dropped: the connection is closed.
    })
}

/// Connects to a [`stopping_agent`], asks it for a flush, and expects to be told it stops.
fn told_it_stops(unread: bool) {
    let path = std::env::temp_dir().join(format!(
        "spacetime-client-{}-{unread}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let agent = stopping_agent(&path, unread);
    let mut conn = AgentConn::connect_for(&path, proto::want::TRACE, 0, || None)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    // Without `unread` the agent has closed before the client's request (its send fails);
    // with it, the request is what the agent leaves unread.
    let agent = match unread {
        false => {
            agent.join().expect("the agent's thread");
            None
        }
        true => Some(agent),
    };
    conn.sync();
    if let Some(agent) = agent {
        agent.join().expect("the agent's thread");
        conn.pump();
    }
    let _ = std::fs::remove_file(&path);
    match conn.gone() {
        Some(Gone::Stopping(why)) => assert!(why.contains("SIGTERM"), "{why}"),
        other => panic!("the reason the agent gave is lost: {other:?}"),
    }
}

/// An agent that stops says why, then closes: a client whose next request finds the
/// connection closed reads that first (it said "Broken pipe", the reason left unread, in a
/// test guest where the agent closed between the client's two requests).
#[test]
fn an_agent_that_stops_is_said_to_stop_when_the_next_send_fails() {
    told_it_stops(false);
}

/// An agent that closes with a request of the client's unread makes the kernel report a
/// reset to the client before the messages the agent sent first: the client reads them
/// after it (it said "Connection reset by peer", the reason unread, in a 6.1 guest).
#[test]
fn an_agent_that_stops_with_a_request_unread_is_said_to_stop() {
    told_it_stops(true);
}
