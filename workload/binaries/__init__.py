"""Readers of binaries, standard library only: which GPU archs a library carries code objects for
(`code_object_reader`: clang offload bundles, per-arch kernel files, what torch loads) and which libraries an
ELF file loads (`elf_needed`).

A room of its own, not part of `workload.probes`, because importing anything under `workload.probes` runs its
__init__, which imports torch: `envbuild inspect` (builder/engine/code_objects.py) imports this package on the host,
where torch may be missing, and images/common/verify_image.py inside the image. Imports nothing from the rest of
`workload`; imported by the arch probe (`workload.probes.arch_code_objects`), builder and the image check
(pyproject.toml [tool.importlinter], tests/project/test_layering.py).
"""
