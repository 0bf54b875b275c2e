"""The `evokernel` command, one module per command: main (the parser and the exit status), run,
check (with kernel_faults and build_only), problems, rundir (show, report, export), suite; the
flags and configs they share in options; the live progress display in progress.
"""
