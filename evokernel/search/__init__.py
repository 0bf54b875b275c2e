"""Stage: selection. The DEAP loop (evolution), planning and running a generation's operator
calls (variation). Data in: evaluated candidates; data out: the next population, to the run store.
"""
