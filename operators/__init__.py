"""Variation operators: they take parents and return candidates, never build or time anything.

Importing this package does not import litellm (evokernel.llm.client imports it only when a call is
made).
"""
from evokernel.operators.base import (Attempt, Crossover, IdeasFirst, Mutation,
                                      RepairOperator, SearchContext)
from evokernel.operators.crossover import LLMCrossover
from evokernel.operators.idea import IdeaMutation
from evokernel.operators.port import SeedPort
from evokernel.operators.repair import Repair
from evokernel.operators.tune import TuneMutation

__all__ = ["Attempt", "Crossover", "IdeaMutation", "IdeasFirst", "LLMCrossover", "Mutation",
           "Repair", "RepairOperator", "SearchContext", "SeedPort", "TuneMutation"]
