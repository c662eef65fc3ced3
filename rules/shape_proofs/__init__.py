"""Proofs of rules over symbolic shapes (what rules/proofs.py hands over when a rule moves,
broadcasts, reduces or multiplies elements, or guards on shapes).

- prover.py: ranks and attribute choices, the query per choice, the verdict;
- encoder.py: tensors as z3 terms (a shape of unknown dims, an element at an index);
- ops.py: each op that moves or combines elements as an index map;
- guards.py: `where` guards read over unknown dims, path by path;
- counterexamples.py: a model made concrete and run in the interpreter.
"""

from .prover import MAX_RANK, Status, is_tensor_rule, prove_tensor_rule

__all__ = ["MAX_RANK", "Status", "is_tensor_rule", "prove_tensor_rule"]
