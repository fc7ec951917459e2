//! Debian's tcpdump on loopback, for the suites that check `wirelint
//! analyse` against the proxy on the same traffic (scripts/test.sh
//! installs it; it needs CAP_NET_RAW, as root has).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A tcpdump writing what goes to and from one TCP port on loopback.
pub struct Tcpdump {
    child: Child,
    path: PathBuf,
    stderr: std::thread::JoinHandle<String>,
}

impl Tcpdump {
    /// Starts capturing `tcp port PORT` on `lo` into `path` (whole packets,
    /// each written as it comes) and returns once tcpdump listens.
    pub fn start(port: u16, path: &Path) -> Tcpdump {
        let mut child = Command::new("tcpdump")
            .args(["-i", "lo", "-s", "0", "-U", "-B", "16384", "-n", "-w"])
            .arg(path)
            .arg(format!("tcp port {port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (Debian: apt-get install tcpdump; scripts/test.sh installs it)");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut said = String::new();
        loop {
            match lines.next() {
                Some(Ok(line)) => {
                    said.push_str(&line);
                    said.push('\n');
                    if line.contains("listening on") {
                        break;
                    }
                }
                _ => panic!("tcpdump did not start listening:\n{said}"),
            }
        }
        let stderr = std::thread::spawn(move || {
            let mut rest = said;
            for line in lines.map_while(Result::ok) {
                rest.push_str(&line);
                rest.push('\n');
            }
            rest
        });
        Tcpdump {
            child,
            path: path.to_owned(),
            stderr,
        }
    }

    /// Stops it (SIGTERM: it writes what it holds and its counts) and
    /// returns the capture's path and what tcpdump said. Fails when the
    /// kernel dropped packets: the comparison would not be fair.
    pub fn stop(mut self) -> (PathBuf, String) {
        // Packets written a moment ago are still on their way through the
        // capture buffer.
        std::thread::sleep(Duration::from_millis(200));
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let said = self.stderr.join().unwrap_or_default();
        let dropped = said
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok());
        assert_eq!(dropped, Some(0), "tcpdump dropped packets:\n{said}");
        (self.path, said)
    }
}
