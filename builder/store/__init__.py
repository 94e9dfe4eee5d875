"""The store: what was measured and what it means. store (a facade over store_schema: the SQLite schema, migrations
and opening checks; store_writes; store_reads), result_schema (the typed result.json every door validates through),
build_record_schema (the typed build-record.json, through the same door), verdict_rules, run_config (a run's
configuration and its verdict label), summary (verdicts per cell), attempts (attempt directories), attempt_files
(which of their files a report may publish) and provenance (who measured a run, as the store records it). Nothing
here builds, runs, signs or renders. It imports `builder.plan` and the neutral modules (`builder.paths`,
`builder.strict_json`, `builder.slug`); workflows, report, attest and cli import it; the engine never does."""
