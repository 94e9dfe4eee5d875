"""The plan: from a version request to a build context, without a daemon. Recipes (recipes/ as typed data),
cells, resolve (request -> Plan), recipe_cells (the cells CI builds), locks (lock_names: where a lock lives;
lock: reading, checking, resolving with uv), the wheelhouse, image_ref (the image-reference
grammar: a pure check, used by inspect and --base-image), steps (the image's stages and build steps, as data),
render/context (the Dockerfile, cell.def and their files), context_identity (which cell a context hash is: a build
record's cell, recomputed) and torch_choice (which recipe cell's torch a managed workload environment gets on a
host). Nothing here talks to Docker, the host or the
matrix file. It imports only `builder.paths` and itself; every other package may import it."""
