//! Whether a process is alive, read from `/proc` (below the state file and
//! the run folder code that both ask).

use std::fs;

/// Whether a process with this PID is alive (and not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // state is the field after the ")" that ends the command name
        Ok(stat) => {
            !matches!(stat.rsplit(')').next().map(str::trim_start), Some(s) if s.starts_with('Z'))
        }
        Err(_) => false,
    }
}
