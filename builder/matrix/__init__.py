"""The matrix: what was measured and what it means. store (a facade over store_schema: the SQLite schema,
migrations and opening checks; store_writes; store_reads), verdict_rules, attempts (attempt directories),
summary (verdicts per cell), report with its templates, plots and compare page, diff, ci_render (the CI
files), gpu_prices, vendor_support and slug. Nothing here builds or runs anything or talks to Docker.
It may import `builder.plan` and `builder.paths`; `builder.engine` and `builder.cli` import it."""
