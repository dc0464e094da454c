//! Audit lines reach stdout through a bounded queue and one writer thread, so
//! a reader that stops reading (a full pipe) stalls that thread only, never a
//! decision: when the queue is full the record is dropped and counted
//! (`driftguard_audit_dropped_total`).

use std::io::Write;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// Records waiting for stdout: about half a MiB of typical lines.
pub const CAPACITY: usize = 1024;

enum Message {
    Line(String),
    /// Answered once every line queued before it is written and flushed.
    Flush(mpsc::Sender<()>),
}

static QUEUE: OnceLock<SyncSender<Message>> = OnceLock::new();
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Records dropped because the queue was full (or its writer gone).
pub fn dropped() -> &'static Counter {
    &DROPPED
}

/// Starts the writer thread; later calls do nothing.
pub fn start() {
    QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::sync_channel(CAPACITY);
        let spawned = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || write_lines(rx, std::io::stdout()));
        if let Err(e) = spawned {
            // The receiver is gone with the closure: every record counts as dropped.
            eprintln!("driftguard: cannot start the audit writer: {e}");
        }
        tx
    });
}

/// Queues one line without waiting; drops and counts it if the queue is full.
pub fn submit(line: String) {
    let Some(queue) = QUEUE.get() else {
        DROPPED.inc();
        return;
    };
    if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
        queue.try_send(Message::Line(line))
    {
        DROPPED.inc();
    }
}

/// Waits at most `within` for the queued lines to be written: at shutdown,
/// so that a live reader gets every record and a stuck one does not hold the
/// exit. Returns whether everything was written.
pub fn flush(within: Duration) -> bool {
    let Some(queue) = QUEUE.get() else {
        return true;
    };
    let deadline = Instant::now() + within;
    let (done, written) = mpsc::channel();
    let mut message = Message::Flush(done);
    loop {
        match queue.try_send(message) {
            Ok(()) => break,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                message = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TrySendError::Full(_)) => return false,
        }
    }
    written
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .is_ok()
}

/// The writer thread: buffers while lines keep coming, flushes when the queue
/// is empty, so a burst costs few writes and a quiet line is not held back.
fn write_lines(rx: Receiver<Message>, out: impl Write) {
    let mut out = std::io::BufWriter::new(out);
    let mut failed = false;
    let mut pending = rx.recv().ok();
    while let Some(message) = pending {
        let result = match message {
            Message::Line(line) => writeln!(out, "{line}"),
            Message::Flush(done) => {
                let result = out.flush();
                let _ = done.send(());
                result
            }
        };
        if let Err(e) = result {
            // A closed stdout must not take the server down; say it once.
            if !failed {
                eprintln!("driftguard: cannot write audit records to stdout: {e}");
            }
            failed = true;
        }
        pending = match rx.try_recv() {
            Ok(next) => Some(next),
            Err(_) => {
                if out.flush().is_err() && !failed {
                    eprintln!("driftguard: cannot write audit records to stdout");
                    failed = true;
                }
                rx.recv().ok()
            }
        };
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_in_order_and_a_flush_waits_for_them() {
        let sink = Sink::default();
        let (tx, rx) = mpsc::sync_channel(4);
        let writer = {
            let sink = sink.clone();
            std::thread::spawn(move || write_lines(rx, sink))
        };
        for i in 0..3 {
            tx.send(Message::Line(format!("r{i}"))).unwrap();
        }
        let (done, written) = mpsc::channel();
        tx.send(Message::Flush(done)).unwrap();
        written.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(&*sink.0.lock().unwrap(), b"r0\nr1\nr2\n");
        drop(tx);
        writer.join().unwrap();
    }
}
