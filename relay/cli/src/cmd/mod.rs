//! One module per subcommand group.

pub mod archive;
pub mod corpus;
pub mod devices;
pub mod events;
pub mod graph;
pub mod harvest;
pub mod heat;
pub mod import;
pub mod knowledge;
pub mod mcp;
pub mod mcp_install;
pub mod memory;
pub mod model;
pub mod open;
pub mod serve;
pub mod sync;
pub mod today;
