//! The integration tests: one binary (one link, one `support`), a module
//! per area. Each module says what it covers; HACKING.md ("Tests") lists
//! them.

mod support;

mod agent_terminal;
mod attack;
mod attack_budget;
mod attack_files;
mod attack_journal;
mod attack_links;
mod attack_members;
mod attack_paths;
mod attack_pings;
mod attack_queue;
mod attack_shared;
mod attack_store;
mod cli_misc;
mod cli_run;
mod cli_tty;
mod corpus;
mod docs;
mod engine;
mod faults;
mod field;
mod field_four;
mod hostile;
mod journal;
mod library_run;
mod outcomes;
mod pings;
mod queue;
mod reap;
mod schedule;
mod scripts;
mod seam;
mod slots;
mod slots_whole;
mod state;
mod store;
mod store_engines;
mod store_etcd;
mod store_field;
mod store_queue;
mod store_slots;
mod tmux;
mod usage;
