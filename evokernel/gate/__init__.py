"""Stage: gate. Is a candidate's output right at the reference's precision, and did it do the work
itself? The judge, the reference side (float64 truths, input sets), running candidate code,
the error maths, input distributions, the source scan and the reference-fallback rule.
"""
