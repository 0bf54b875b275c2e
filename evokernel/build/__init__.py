"""Stage: build. A candidate's load_inline extension compiled on the CPU in its own process and
folder, cached by source, flags, versions and GPU arch (builder, entry, cache, headers).
"""
