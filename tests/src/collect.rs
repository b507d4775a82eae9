//! A pipe collected in the background, as the tests read spacetime's output.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{hang_guard, poll};

/// Collects a pipe in the background. Survivors of the traced tree (e.g. with
/// `--stop-on-root-exit`) may hold the pipe open after spacetime exits, so `Running::wait`
/// doesn't wait for EOF indefinitely.
pub(crate) struct Collector {
    buf: Arc<Mutex<Vec<u8>>>,
    handle: JoinHandle<()>,
    /// The pipe again, to see what waits in it unread.
    pipe: Option<std::os::fd::OwnedFd>,
    /// Set while the reader holds bytes it took from the pipe and has not yet put in `buf`.
    busy: Arc<AtomicBool>,
}

pub(crate) fn reader<R: std::io::Read + std::os::fd::AsFd + Send + 'static>(mut r: R) -> Collector {
    let pipe = r.as_fd().try_clone_to_owned().ok();
    let buf = Arc::new(Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicBool::new(false));
    let (b, taking) = (buf.clone(), busy.clone());
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            // Busy from before it takes bytes until they are in `buf`: it waits for them
            // first.
            wait_readable(r.as_fd());
            taking.store(true, Ordering::SeqCst);
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => b
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            taking.store(false, Ordering::SeqCst);
        }
    });
    Collector {
        buf,
        handle,
        pipe,
        busy,
    }
}

/// Returns once `fd` has bytes or its end (or cannot be polled).
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>) {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive for the call.
    while unsafe { libc::poll(&mut p, 1, -1) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

impl Collector {
    /// Everything read so far, after waiting up to `grace` for EOF. Not at EOF after it (a
    /// survivor holds the pipe): what came so far, once the reader has taken what waits in
    /// the pipe and put it in `buf` (on a busy CPU it may not have run since the writer
    /// ended). The pipe is looked at first: bytes it no longer holds are the reader's, and in
    /// `buf` once it is no longer busy.
    pub(crate) fn take(&self, grace: Duration) -> Vec<u8> {
        let t0 = Instant::now();
        let drained = || self.unread() == 0 && !self.busy.load(Ordering::SeqCst);
        let _ = poll::poll(
            hang_guard(Duration::from_secs(60)),
            Duration::from_millis(5),
            || (self.handle.is_finished() || (t0.elapsed() >= grace && drained())).then_some(()),
        );
        let out = std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()));
        out
    }

    /// What came so far, as text (invalid UTF-8 replaced), the pipe still being read.
    pub(crate) fn text_so_far(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Bytes waiting in the pipe (none if that cannot be told).
    fn unread(&self) -> i32 {
        let Some(pipe) = &self.pipe else { return 0 };
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int, to a local that outlives the call.
        let r = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(pipe),
                libc::FIONREAD,
                &mut n,
            )
        };
        if r == 0 {
            n
        } else {
            0
        }
    }
}
