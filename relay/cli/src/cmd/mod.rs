//! One module per subcommand group.

pub mod corpus;
pub mod devices;
pub mod mcp;
pub mod model;
pub mod open;
pub mod serve;
