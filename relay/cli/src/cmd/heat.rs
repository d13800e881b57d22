//! `personkit heat`: how much each record was used lately (`personkit_heat`): `heat list` by tier, and
//! `heat recompute`, the pass `serve` runs every six hours.

use clap::{Args, Subcommand, ValueEnum};
use personkit_heat::{Kind, Tier};
use personkit_store::clock::Clock;
use personkit_store::heat as rows;

use crate::args::{DbArg, JsonArgs};
use crate::output::{print_json, print_table};

#[derive(Debug, Subcommand)]
pub enum HeatCommand {
    /// Records by heat, hottest first: `heat list --tier hot`.
    List(ListArgs),
    /// Compute every record's heat again now (`serve` does it every six hours).
    Recompute(RecomputeArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TierArg {
    Hot,
    Warm,
    Cold,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    Thread,
    Entity,
    Event,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub out: JsonArgs,
    /// Only records of this tier.
    #[arg(long)]
    pub tier: Option<TierArg>,
    /// Only records of this kind.
    #[arg(long)]
    pub kind: Option<KindArg>,
    /// At most this many records (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
}

#[derive(Debug, Args)]
pub struct RecomputeArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print one JSON document instead of a line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: HeatCommand) -> anyhow::Result<()> {
    match c {
        HeatCommand::List(a) => list(a),
        HeatCommand::Recompute(a) => recompute(a),
    }
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let conn = a.out.db.open_read_only()?;
    let tier = a.tier.map(|t| match t {
        TierArg::Hot => Tier::Hot,
        TierArg::Warm => Tier::Warm,
        TierArg::Cold => Tier::Cold,
    });
    let kind = a.kind.map(|k| match k {
        KindArg::Thread => Kind::Thread,
        KindArg::Entity => Kind::Entity,
        KindArg::Event => Kind::Event,
    });
    let list = rows::list(&conn, kind, tier, a.limit)?;
    if a.out.json {
        return print_json(&list);
    }
    if list.is_empty() {
        println!(
            "no {} records: heat comes from use (opening a thread in the dashboard, an agent reading it, new turns)",
            tier.map_or("used", Tier::as_str)
        );
        return Ok(());
    }
    let table: Vec<Vec<String>> = list
        .iter()
        .map(|r| {
            vec![
                r.kind.as_str().to_owned(),
                r.id.clone(),
                r.tier.as_str().to_owned(),
                format!("{:.2}", r.heat),
                r.accesses.to_string(),
                r.last_access.clone(),
            ]
        })
        .collect();
    print_table(&["KIND", "ID", "TIER", "HEAT", "USES", "LAST USE"], &table)
}

fn recompute(a: RecomputeArgs) -> anyhow::Result<()> {
    let conn = a.db.open_existing()?;
    let now = Clock::system().now();
    let n = personkit_heat::recompute(&conn, now)?;
    if a.json {
        return print_json(&serde_json::json!({ "recomputed": n }));
    }
    println!("heat computed again for {n} records");
    Ok(())
}
