"""Decoding rules, grouped by what they do; each chooses, from one step's scores, which masked positions to commit
(and which written tokens to take back or replace).

    core             the contract with the loop (Scores, Choice, Rule) and the rankings rules share
    schedule         a count of tokens a pass set in advance: Vanilla, Top-k, PC-Sampler, Prophet
    threshold        every position whose score clears a bar: Fast-dLLM, EB-Sampler, KLASS, dInfer's two
    divide_conquer   DiCo: clusters found, then decoded in parallel
    takeback         a step may take tokens back to the mask: WINO, Saber, ReMDM, token-to-mask
    editing          a step may replace written tokens: LLaDA 2.1

``dico.methods`` maps each method's name to its rule.
"""
from dico.rules.core import Choice, Rule, Schedule, Scores, factor_set, top1, top_ranked

__all__ = ["Choice", "Rule", "Schedule", "Scores", "factor_set", "top1", "top_ranked"]
