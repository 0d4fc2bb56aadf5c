"""The embedded model's making: what dico-tiny (assets/dico-tiny) is trained on and how it is measured.

``tasks`` (the word-problem and list families, their held-out split and checker), ``wordings`` (how the worked
answers are worded), ``scope`` (what the model was trained on, told to a visitor), ``tokenizer``, ``objective``
(the loss and what a batch masks), ``train`` (``python -m dico.embedded.train``) and ``card``
(``python -m dico.embedded.card``, the model card's measures).

It may import the decoding library (``dico``'s top-level modules); the library never imports it, and it never
imports ``dico.bench``, which measures with its tasks.
"""
