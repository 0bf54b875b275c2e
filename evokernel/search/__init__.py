"""Stage: selection. The DEAP loop and its toolbox (evolution, toolbox), planning and making a
generation's operator calls in phases (variation), what each call is told (contexts, lineage),
keeping the calls apart (diversity), the MAP-Elites archive and survival selection (archive), and
what a run returns and saves to resume (runstate). Data in: evaluated candidates; data out: the
next population, to the run store.
"""
