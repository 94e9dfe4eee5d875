"""The matrix: what was measured and what it means. store (a facade over store_schema: the SQLite schema,
migrations and opening checks; store_writes; store_reads), result_schema (the typed result.json every
door validates through), verdict_rules, attempts (attempt directories), attempt_files (which of their files
a report may publish), site_folders (the report's building/old folders),
summary (verdicts per cell), report with its templates, plots and compare page, diff, ci_render (the CI
files), gpu_prices, vendor_support, slug, attest (signed attestations of results: in-toto statements in DSSE
envelopes, ssh-keygen signatures) and provenance (who measured a run). Nothing here builds or runs anything or talks to Docker.
It may import `builder.plan` and `builder.paths`; `builder.engine` and `builder.cli` import it."""
