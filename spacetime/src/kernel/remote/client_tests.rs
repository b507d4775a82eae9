//! Unit tests of [`super`]: what a client makes of an agent that goes away.

use super::*;

/// An agent that stops says why, then closes: a client whose next request finds the
/// connection closed reads that first (it said "Broken pipe", the reason left unread, in a
/// test guest where the agent closed between the client's two requests).
#[test]
fn an_agent_that_stops_is_said_to_stop_when_the_next_send_fails() {
    let path = std::env::temp_dir().join(format!("spacetime-client-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = sock::listen(&path).expect("listen");
    let agent = std::thread::spawn(move || {
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
        let reason = b"SIGTERM: the agent stops".to_vec();
        sock::send(fd.as_fd(), &Msg::Shutdown { reason }.encode(), None).expect("shutdown");
        // Dropped: the connection is closed.
    });
    let mut conn = AgentConn::connect_for(&path, proto::want::TRACE, 0, || None)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    agent.join().expect("the agent's thread");
    let _ = std::fs::remove_file(&path);
    conn.sync();
    match conn.gone() {
        Some(Gone::Stopping(why)) => assert!(why.contains("SIGTERM"), "{why}"),
        other => panic!("the reason the agent gave is lost: {other:?}"),
    }
}
