//! The shell's IPC command under Tauri's MockRuntime (no display): a real engine on port 0
//! behind the supervisor; `control` round-trips engine routes and `/api/app`.
