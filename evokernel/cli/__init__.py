"""The `evokernel` command: main (parsing, exit status, run/show/report/export), check and suite,
the live progress display.
"""
