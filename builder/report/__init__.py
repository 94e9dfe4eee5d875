"""The published report: site (the static site, with its templates in report_templates/), compare (the compare
page), diff (two cells side by side), gpu_prices, ladder (a cell's evidence ladder), plots, site_folders (the
site's building/old folders) and vendor_support (what AMD lists for a cell). It reads the store and never
writes it. It imports `builder.store`, `builder.plan` and the neutral modules; workflows and cli import it."""
