"""Right or wrong for any prompt of a trained shape: the task item read back from the prompt itself (the choices a
pick or team prompt names, the answer a list or word problem computes to), so the family's own checker
(``tasks.check``) can judge every answer. Where a prompt cannot be read with certainty, there is no item: the app
says it cannot judge rather than guess.

    item = item_for("Pick two of these: kites, drums, hats and cups.")
    tasks.check(item, "I pick dres and dres.")      # False
"""
from __future__ import annotations

import re

from dico.embedded.picks import joined
from dico.embedded.scope import task_shape
from dico.embedded.tasks import ADJECTIVES, FEMALE, HELD_OUT_FEMALE, HELD_OUT_MALE, MALE, Item, check

COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_COUNT = re.compile(r"\b(one|two|three|four|five|six)\b", re.IGNORECASE)
_OBJECT = r"[a-z]+(?: (?:cars|pieces|games|cranes|soldiers|bears))?"   # tasks.OBJECTS' two-word ones end so
_PERSON = r"[A-Z][a-z]+ [A-Z][a-z]+"
_NUMBER = re.compile(r"\d+")


def _listed(pattern: str, text: str) -> list[str] | None:
    """The longest 'a, b and c' list of ``pattern`` items in ``text``, as its items."""
    lists = re.findall(rf"\b((?:{pattern}, )*{pattern} and {pattern})\b", text)
    if not lists:
        return None
    return re.split(r", | and ", max(lists, key=len))


def _choice(shape: str, prompt: str) -> Item | None:
    """A pick or team item: the things (full names) the prompt offers and how many to choose."""
    offered = _listed(_OBJECT if shape == "pick" else _PERSON, prompt)
    if shape == "pick":
        words = _COUNT.findall(prompt)
        count = COUNTS[words[-1].lower()] if words else 0
    else:
        team = re.search(r"\bteam of (\w+)|(\w+) people\b", prompt)
        word = (team.group(1) or team.group(2)).lower() if team else "one"
        count = COUNTS.get(word, 0)
    if not offered or not 0 < count < len(offered) + 1 or len(set(offered)) != len(offered):
        return None
    return Item(shape, prompt, "", joined(offered[:count]), offered=tuple(offered), count=count)


def _list_result(prompt: str) -> list[int] | None:
    span = re.search(r"\d+(?:\s*,\s*\d+)+", prompt)
    if not span:
        return None
    items = [int(n) for n in _NUMBER.findall(span.group())]
    rest = [int(n) for n in _NUMBER.findall(prompt[:span.start()] + prompt[span.end():])]
    if re.search(r"\b(double|twice)\b", prompt, re.IGNORECASE) and not rest:
        return [x * 2 for x in items]
    if len(rest) != 1:
        return None
    k = rest[0]
    if re.search(r"\bmultiply\b", prompt, re.IGNORECASE):
        return [x * k for x in items]
    if re.search(r"\b(subtract|away|smaller)\b", prompt, re.IGNORECASE):
        return [x - k for x in items]
    if re.search(r"\b(add|increase)\b", prompt, re.IGNORECASE):
        return [x + k for x in items]
    return None


# ----------------------------------------------------------------------------- word problems
# A word problem is read as a story about one person's count of one kind of thing: where the count starts ("Lena
# has 12 pencils"), what each clause does to it (one of the families' operations: a gain, a loss, a doubling or, in
# the long ones of the chain family, a halving, in the words people use for them) and what the question asks (that
# count, at the end). A clause with a number must
# be accounted for word by word by the small grammar below; one it cannot account for, or could read two ways
# (another person's count, an unknown verb, a pronoun that may mean someone else, a question about something
# else), leaves the problem unread: the app says it cannot judge rather than guess.

def _lexicon(*tables: tuple[str, str]) -> dict[tuple[str, ...], tuple[str, str]]:
    """{words: (kind, number)} from "eats/ate/eat/eaten|..." entries: the third-person ("s"), past (""), plural ("p")
    and past participle ("pp") forms of a verb; the plural one is read only after "they" or the things themselves
    ("Her shells double"), the participle only after "has" ("She has eaten 3")."""
    verbs = {}
    for kind, entries in tables:
        for entry in entries.split("|"):
            for form, number in zip(entry.split("/"), ("s", "", "p", "pp")):
                if form:
                    verbs[tuple(form.split())] = (kind, number)
    return verbs


_VERBS = _lexicon(
    ("gain", "finds/found/find|gets/got/get/gotten|wins/won/win|receives/received/receive|"
             "collects/collected/collect|picks up/picked up/pick up|picks/picked/pick|earns/earned/earn|"
             "gathers/gathered/gather|catches/caught/catch|is given/was given/are given|/were given/|"
             "gets given/got given/get given"),
    ("buy", "buys/bought/buy|makes/made/make|bakes/baked/bake"),           # a gain, also when bought for them
    ("loss", "loses/lost/lose|eats/ate/eat/eaten|sells/sold/sell|uses/used/use|uses up/used up/use up|"
             "breaks/broke/break/broken|drops/dropped/drop|spends/spent/spend|gives away/gave away/give away/"
             "given away|gives out/gave out/give out/given out|hands out/handed out/hand out|"
             "throws away/threw away/throw away/thrown away|donates/donated/donate|"
             "misplaces/misplaced/misplace|gets rid of/got rid of/get rid of/gotten rid of"),
    ("throw", "throws/threw/throw/thrown"),                                 # a loss with "away" after the things
    ("give", "gives/gave/give/given|hands/handed/hand|passes/passed/pass|sends/sent/send|mails/mailed/mail|"
             "lends/lent/lend|returns/returned/return"),                     # fewer or more by who gives: _give
    ("take", "takes/took/take/taken|steals/stole/steal/stolen"),             # more or fewer by who takes: _take
    ("double", "doubles/doubled/double|is doubled/was doubled/are doubled|/were doubled/"),
    ("halve", "halves/halved/halve|is halved/was halved/are halved|/were halved/"),
    ("share", "shares/shared/share|splits/split|divides/divided/divide"),    # "shares them equally with a friend"
    ("have", "has/had/have|owns/owned/own|keeps/kept/keep|counts/counted/count|holds/held/hold|"
             "contains/contained/contain|has got/had got/have got|starts with/started with/start with|"
             "begins with/began with/begin with|starts the day with/started the day with/start the day with|"
             "starts out with/started out with/start out with|ends up with/ended up with/end up with"),
    ("there", "there is/there was/there are|/there were/"),
    ("be", "is/was/are|/were/"),
)
_CHANGES = {"gain", "buy", "loss", "throw", "give", "take", "double", "halve", "share"}
_NUMBER_WORDS = {word: n for n, word in enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight",
                                                   "nine", "ten", "eleven", "twelve", "thirteen", "fourteen",
                                                   "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                                                   "twenty"], 1)}
_SUBJECTS = ("he", "she", "they")
_OBJECTIVE = {"him": "he", "her": "she", "them": "they"}       # who "gives her 3" gives to
_POSSESSIVE = {"his": "he", "her": "she", "their": "they"}      # whose "her shells" are
_KIN = {**dict.fromkeys(("brother", "father", "dad", "uncle", "grandpa", "son", "boy", "man"), "he"),
        **dict.fromkeys(("sister", "mother", "mom", "mum", "aunt", "grandma", "daughter", "girl", "woman"), "she")}
_ADVERBS = {"then", "later", "next", "now", "also", "too", "again", "afterwards", "finally", "soon", "today",
            "yesterday", "first", "meanwhile", "suddenly", "happily", "quickly", "still", "just"}
_PLACES = {"at", "in", "on", "after", "before", "during", "from", "by", "near", "inside", "outside", "under",
           "behind", "around"}
_WHEN = _PLACES | _ADVERBS | {"for"}       # heads of the phrases that say where or when
_PARTICLES = {"away", "out", "back"}
# "for" a meal or an occasion says when ("eats 2 for breakfast"); for someone it may say who gets them ("buys 3 for
# her sister"): not read.
_OCCASIONS = {"breakfast", "lunch", "dinner", "supper", "tea", "snack", "birthday", "christmas", "homework"}
_MEASURES = {"price", "value", "size", "length", "weight", "height", "cost", "worth", "width"}   # "double in price"
_ADJECTIVES = set(ADJECTIVES) | {"little", "large", "tiny", "pink", "purple", "black", "white", "brown", "orange",
                                 "broken", "extra", "spare", "other", "nice", "pretty", "fresh", "ripe", "rare",
                                 "lovely"}
# In a clause without a number, a word that makes it more than a description ("She eats some", "He has no more").
_QUANTITY = {"some", "all", "none", "half", "few", "several", "many", "most", "more", "fewer", "less", "rest",
             "each", "every", "any", "dozen", "twice", "double", "triple", "away", "back", "no", "not", "never",
             "both", "everyone", "everybody", "nobody"}
# Words that are no one's name and in no one's name ("Lena and Omar", "When she ...", "She does not buy").
_NO_PERSON = {"he", "she", "they", "it", "we", "you", "i", "and", "but", "or", ",", "not", "never", "no", "will",
              "would", "can", "could", "might", "may", "should", "must", "does", "did", "do", "doesn't", "didn't",
              "don't", "won't", "can't", "to", "if", "when", "because", "while", "who", "which", "that", "as",
              "wants", "wanted", "tries", "tried", "plans", "needs", "forgets", "almost", "nearly", "only", "so",
              "there", "how", "many", "<OBJ>", "<P>"}
# Words after which the counted things' name is a noun ("3 shells", "the shells", "collects shells"): only there
# is it taken for them, so things named by a verb ("Abbey has 5 gives") are not mistaken for one.
_BEFORE_NOUN = {"more", "many", "of", "the", "his", "her", "their", "<P>'s", "likes", "collects", "doubles", "other",
                "those", "these", "all", "some", "any", "another"} | _ADJECTIVES
# One person shared with, by a word after "a", "the", "his" or "her" ("a friend", "her little sister"); a name of the
# name lists is one too. "Her friends", "everyone": how many? Not read.
_ONE_PERSON = set(_KIN) | {"friend", "neighbour", "neighbor", "teacher", "classmate", "stranger", "coach", "cousin",
                           "grandma", "grandpa", "granny", "grandmother", "grandfather", "partner", "pal", "buddy",
                           "twin", "teammate", "roommate", "child", "kid", "nephew", "niece", "husband", "wife"}
_PERSON_WORDS = {"best", "little", "big", "older", "younger", "baby", "twin", "new", "old", "good", "only"}
_EQUALLY = ("equally", "evenly")
_TOKEN = re.compile(r"\d+|[A-Za-z]+(?:'[A-Za-z]+)?|[^\sA-Za-z\d]")
_ENDS = {".", "!", "?", ";"}


def _verb(words: list, start: int = 0) -> tuple[int, int, str, str] | None:
    """The first verb the reader knows in a clause, from ``start``: where it is, how many words (the longest form
    there: "picks up", "is given"; "has lost" reads as "lost"), its kind and number."""
    for at in range(start, len(words)):
        for size in (4, 3, 2, 1):
            key = tuple(w for w in words[at:at + size] if isinstance(w, str))
            if len(key) == size and key in _VERBS:
                kind, number = _VERBS[key]
                then = _verb(words[at + 1:at + 5]) if key in (("has",), ("had",), ("have",)) else None
                if then and then[0] == 0 and then[2] in _CHANGES and then[3] in ("", "pp"):
                    return at, 1 + then[1], then[2], number
                return at, size, kind, number
    return None


def _clauses(sentence: list) -> list[list]:
    """A sentence's clauses: split at ",", "and", "but" and "then" where the parts have verbs of their own, so "She
    gives 4 to Omar and then buys 7 more" is two changes while "Lena and Omar have 12" stays one clause (and is
    not read). A part without a verb ("At first", "and Sara") joins the next clause, or the one before at the end;
    one that starts with a number repeats the verb before it ("gives 6 to Sara and 4 to Ben")."""
    parts, joints, part = [], [], []
    for word in sentence:
        if word in (",", "and", "but", "then"):
            parts.append(part)
            joints.append(word)
            part = []
        else:
            part.append(word)
    parts.append(part)
    joints.append(None)
    verbs = [_verb(part) is not None for part in parts]
    clauses, lead = [], []
    for i, part in enumerate(parts):
        if verbs[i]:
            clauses.append(lead + part)
            lead = []
        elif len(part) > 1 and isinstance(part[0], int) and clauses and joints[i - 1] in (",", "and") and \
                not isinstance(clauses[-1][-1], int):            # not "buys 3 and 2 more": 3 what?
            at, size = _verb(clauses[-1])[:2]                  # "gives 6 to Sara and 4 to Ben": "gives" again
            clauses.append(clauses[-1][:at + size] + part)
        elif part and (any(verbs[i + 1:]) or not clauses):
            lead += part + [joints[i]] * (joints[i] is not None)
        elif part:
            clauses[-1] += [joints[i - 1]] + part
    return clauses + [lead] * bool(lead)


class _Reading:
    """One word problem as it is read: the person asked about (their name masked as "<P>"), the counted things
    ("<OBJ>"), how the story refers to the person, whether anyone else has appeared, and who acted last (a clause
    without a subject continues it: "... and then buys 7 more")."""

    def __init__(self, pronoun: str | None):
        self.pronoun = pronoun      # "he"/"she" by the name lists, else the first pronoun the story uses for them
        self.others = False         # someone else has appeared: a pronoun may then mean them
        self.met = False            # someone else acts in or is named by the clause being read
        self.actor = None           # that someone's he/she when they act in it ("?": not known)
        self.named = False          # the things have been named ("collects shells and has 5": 5 shells)
        self.subject = None

    def refers(self, pronoun: str) -> bool:
        """Whether a he/she/they means the person: it agrees with how the story refers to them (the name's gender
        or the pronoun used for them before); while no one else has appeared, there is no one else it could mean."""
        if self.pronoun is None or not self.others:
            self.pronoun = pronoun
        return pronoun == self.pronoun

    def is_person(self, words: list) -> bool:
        """Whether someone given to or taken from is the person: the name, or "him"/"her"/"them" meaning them."""
        return words == ["<P>"] or (len(words) == 1 and words[0] in _OBJECTIVE and self.refers(_OBJECTIVE[words[0]]))

    def mine(self, word) -> bool:
        """Whether a possessive means the person's: "Nora's", or a his/her that means them and cannot mean someone
        else acting in the clause ("Sam's brother takes 4 of his marbles": whose?)."""
        pronoun = _POSSESSIVE.get(word)
        return word == "<P>'s" or (pronoun is not None and self.refers(pronoun) and self.actor not in (pronoun, "?"))

    def things(self, words: list) -> bool:
        """Whether words name the person's counted things: "the shells", "her red shells", "Nora's shells", "them",
        "the number of (her) shells"."""
        if words[:3] == ["the", "number", "of"]:
            words = words[3:]
        if words in (["them"], ["those"], ["these"]):
            return True
        if words and (words[0] == "the" or self.mine(words[0])):
            words = words[1:]
        while words[:1] and words[0] in _ADJECTIVES:
            words = words[1:]
        return words == ["<OBJ>"]

    def who(self, before: list, number: str) -> str | None:
        """Who acts in a clause, from the words before its verb: "person", "things" (the counted things: "The number
        of shells doubles"), "other" (anyone else: "her brother", "Omar", "a friend"), or None when it cannot tell
        ("Lena and Omar", "When she"); no words: whoever acted in the clause before."""
        before = _after_comma(before)
        if not before:
            return self.subject
        *lead, last = before
        if lead and (lead[0] in _PLACES or lead[0] == "for" and lead[-1] in _OCCASIONS) and _plain(lead) and \
                (last == "<P>" or last in _SUBJECTS):
            lead = []                                         # "On Monday she", "For his birthday Ben"
        if not lead and last == "<P>":
            return "person" if number != "p" else None
        if not lead and last in _SUBJECTS:
            agrees = number == "" or (number == "p") == (last == "they")
            return "person" if agrees and self.refers(last) else None
        if self.things(before):
            return "things"
        # Several others ("Both of her friends give her 3", "Everyone gives her 3"): each, or together? Not read.
        return "other" if _plain(before) and not _QUANTITY & set(before) and number != "p" else None

    def amount(self, words: list, more: bool = True) -> tuple[int, int] | None:
        """The number a clause moves and how many of its words name the things: "3", "3 more", "another 3 shells",
        "3 of them", "3 of her shells", or "half" ("half", "half of them", "half her shells"); None when it is not
        one number of the counted things ("3 pens", "some", "half an apple")."""
        if more and words[:1] == ["half"]:
            of = int(words[1:2] == ["of"])
            end = next((k for k in range(2 + of, len(words) + 1) if self.things(words[1 + of:k])), None)
            return ("half", end) if end else None if of else ("half", 1)
        i = int(words[:1] == ["another"])
        if len(words) <= i or not isinstance(words[i], int):
            return None
        n, i = words[i], i + 1
        if more and words[i:i + 1] == ["more"]:
            i += 1
        j = i
        while j < len(words) and words[j] in _ADJECTIVES:
            j += 1
        if words[j:j + 1] in (["<OBJ>"], ["ones"]):
            return n, j + 1
        if more and words[i:i + 1] == ["of"]:
            end = next((k + 1 for k in range(i + 1, len(words)) if words[k] in ("<OBJ>", "them", "those", "these")),
                       None)
            return (n, end) if end and self.things(words[i + 1:end]) else None
        return (n, i) if j == i else None

    def phrases(self, words: list) -> list[tuple[str, list]] | None:
        """The phrases after a clause's things: [(head, words)] for a place or time ("at the market", "on the way to
        school", "for lunch"), "to", "from" or "by" someone, a particle ("away") or an adverb; None for anything else
        ("for her sister", "and Sara", a second number)."""
        out = []
        for i, word in enumerate(words):
            noun = i > 0 and words[i - 1] in ("the", "a", "an")      # "during the break", "in the next game"
            first = all(head in _PARTICLES for head, _ in out)           # "to" someone: right after the things
            if not noun and (word in _WHEN or word in _PARTICLES or (word == "to" and first)):
                out.append((word, []))
            elif out and out[-1][0] not in _PARTICLES | _ADVERBS and word not in _QUANTITY | _MEASURES and _plain(
                    [word], allow={"it", "to", "<P>", "<OBJ>"}, verbs=noun):
                out[-1][1].append(word)
            else:
                return None
        if any(head == "for" and not (words and words[-1] in _OCCASIONS) for head, words in out):
            return None
        return out

    def clause(self, words: list, started: bool) -> tuple[str, int] | None:
        """One clause's effect on the count: ("start", n), ("add", n), ("sub", n), ("double", 0) or ("idle", 0) for
        one that leaves it as it is ("It is a sunny day"); None when it cannot be read."""
        at, size, kind, number = _verb(words) or (len(words), 0, None, "")
        if kind == "gain" and words[at].startswith("collect") and not started:
            kind = "have"                   # "Eddie collects kettles and has 2": what they collect, not a change
        before, after = words[:at], words[at + size:]
        if number == "pp":
            return None                     # "She eaten 3"
        subject = None if kind == "there" else self.who(before, number)
        self.named = self.named or "<OBJ>" in words
        self.met = subject == "other"       # someone else in this clause: a later pronoun may mean them
        someone = _after_comma(before)
        self.actor = None if not self.met else _gender(someone[-1]) if someone else self.actor   # none: as before
        numbered = any(isinstance(w, int) for w in words)
        if kind == "there" and numbered:
            op = None if started else self.there(after)
        elif kind == "have" and (numbered or after[:1] == ["twice"]):
            # "Now she has twice as many" may sum up the change before it rather than be one
            op = (None if "now" in before else self.twice(subject, after)) if started else \
                self.start(subject, before, after)
        elif not numbered and kind not in _CHANGES:
            op = ("idle", 0) if kind == "be" or not _QUANTITY & set(words) else None
        elif not started or subject is None or kind not in _CHANGES:
            op = None
        else:
            op = {"give": self.give, "buy": self.buy, "take": self.take, "double": self.double, "halve": self.double,
                  "share": self.share}.get(kind, self.change)(kind, subject, after)
        if op and op[1] == "half":          # "loses half of them", "gives half to Omar": the count halves
            op = ("halve", 0) if op[0] == "sub" else None       # "gets half of them": half of what? Not read
        self.subject, self.others = subject, self.others or self.met
        return op

    def start(self, subject: str | None, before: list, after: list) -> tuple[str, int] | None:
        """How many the person has at first: "Lena has 12 pencils", "Lena has a bag with 12 pencils in it", "Lena's
        box holds 12 pencils"."""
        owner = _after_comma(before)
        if subject != "person" and not (len(owner) == 2 and owner[0] == "<P>'s"):
            return None
        if after[:1] in (["a"], ["an"]):
            k = next((k for k in (2, 3) if after[k:k + 1] in (["with"], ["of"])), None)
            after = after[k + 1:] if k else []
        got = self.amount(after, more=False)
        phrases = self.phrases(after[got[1]:]) if got and self.named else None     # "has 5": 5 what?
        return ("start", got[0]) if phrases is not None and _heads(phrases) <= _WHEN else None

    def there(self, after: list) -> tuple[str, int] | None:
        """"There are 12 pencils in Lena's box": the person's count at first."""
        got = self.amount(after, more=False)
        phrases = self.phrases(after[got[1]:]) if got else None
        if phrases is None or not _heads(phrases) <= _WHEN:
            return None
        return ("start", got[0]) if any(head == "in" and words[:1] == ["<P>'s"] and len(words) == 2
                                        for head, words in phrases) else None

    def twice(self, subject: str | None, after: list) -> tuple[str, int] | None:
        """"Later she has twice as many shells as before": the count doubles."""
        if subject != "person" or after[:3] != ["twice", "as", "many"]:
            return None
        rest = after[4:] if after[3:4] == ["<OBJ>"] else after[3:]
        if rest[:1] == ["as"]:                              # "as before", "as at first", "as she had"
            rest = rest[1:]
            if rest[1:2] in (["had"], ["did"]) and (rest[0] == "<P>" or rest[0] in _SUBJECTS and self.refers(rest[0])):
                rest = rest[2:]
            elif not rest:
                return None
        phrases = self.phrases(rest)
        return ("double", 0) if phrases is not None and _heads(phrases) <= _WHEN else None

    def change(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """A gain ("buys 3 more", "is given 3 at school") or a loss ("eats 3", "sells 3 to Omar", "throws 3 away")
        of the person's; someone else's ("Her brother eats 3") is not read."""
        got = self.amount(after)
        phrases = self.phrases(after[got[1]:]) if got else None
        if subject != "person" or phrases is None or any(words == ["<P>"] for _, words in phrases):
            return None
        allowed = _WHEN | ({"to"} if kind != "gain" else set()) | ({"away", "out"} if kind == "throw" else set())
        heads = _heads(phrases)
        if not heads <= allowed or (kind == "throw" and not heads & {"away", "out"}):
            return None
        self.met = any(head in ("to", "from", "by") and words for head, words in phrases)
        return ("add" if kind == "gain" else "sub"), got[0]

    def give(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """"She gives 4 (of them) to Omar", "She gives Omar 4", "She gives 4 away": fewer. "Omar gives her 3 more",
        "Grandma gives 3 shells to Lena": more. Anyone else giving to anyone else: not read."""
        k = next((k for k, w in enumerate(after) if isinstance(w, int) or w in ("another", "half")), None)
        got = self.amount(after[k:]) if k is not None else None
        phrases = self.phrases(after[k + got[1]:]) if got else None
        whom, to = after[:k], [words for head, words in phrases or [] if head == "to"]
        if phrases is None or not _plain(whom, allow={"<P>"}) or len(to) + bool(whom) > 1:
            return None
        heads, whom = _heads(phrases), whom or (to[0] if to else [])
        if not heads <= _WHEN | _PARTICLES | {"to"}:
            return None
        if subject == "person":
            self.met = bool(whom)
            pronoun = _OBJECTIVE.get(whom[0]) if len(whom) == 1 else None
            if whom in (["<P>"], ["herself"], ["himself"], ["themselves"]):
                return None                         # to themselves
            if pronoun and self.pronoun in (pronoun, None):
                return None                         # "Tom gives him 3": "him" could be Tom too
            return "sub", got[0]
        if subject == "other" and self.is_person(whom) and not heads & {"away", "out"}:
            return "add", got[0]
        return None

    def buy(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """"She buys 3 more": more. "Grandma buys him 5 more", "Omar makes Lena 2 cards": more, bought for the
        person (named right after the verb). Bought for anyone else, or "for" someone, is not read."""
        if subject == "person":
            return self.change("gain", subject, after)
        k = next((k for k, w in enumerate(after) if isinstance(w, int) or w == "another"), None)
        got = self.amount(after[k:]) if k else None
        phrases = self.phrases(after[k + got[1]:]) if got else None
        if subject != "other" or phrases is None or not _heads(phrases) <= _WHEN or not self.is_person(after[:k]):
            return None
        return "add", got[0]

    def take(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """"She takes 3 from the box": more. "Omar takes 3 of her shells", "Omar takes 3 from her": fewer."""
        got = self.amount(after)
        phrases = self.phrases(after[got[1]:]) if got else None
        if phrases is None or not _heads(phrases) <= _WHEN:
            return None
        source = [words for head, words in phrases if head == "from"]
        self.met = self.met or bool(source)
        if subject == "person" and len(source) == 1 and source[0] != ["<P>"] and "of" not in after[:got[1]]:
            return "add", got[0]
        if subject == "other" and (source == [] and "of" in after[:got[1]] or
                                   len(source) == 1 and self.is_person(source[0])):
            return "sub", got[0]
        return None

    def double(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """"She doubles her shells", "The number of shells doubles", "Her shells are doubled"; "She halves her
        shells" alike (``kind`` "halve")."""
        if any(isinstance(w, int) for w in after):
            return None
        if subject == "person":
            k = next((k for k in range(len(after), 0, -1) if self.things(after[:k])), None)
            after = after[k:] if k else [None]
        elif subject != "things":
            return None
        phrases = self.phrases(after)
        return (kind, 0) if phrases is not None and _heads(phrases) <= _WHEN else None

    def share(self, kind: str, subject: str, after: list) -> tuple[str, int] | None:
        """"She shares them equally with a friend", "He splits his shells evenly with Omar", "She shares half of
        them with her sister": the person keeps half. Shared with several ("with her friends", "among 3 friends"),
        without "equally" (how many?) or by someone else: not read."""
        half = self.amount(after) if after[:1] == ["half"] else None
        k = half[1] if half else next((k for k in range(len(after), 0, -1) if self.things(after[:k])), None)
        if subject != "person" or k is None:
            return None
        rest, equal = after[k:], 0
        if rest[:1] and rest[0] in _EQUALLY:
            rest, equal = rest[1:], 1
        if rest[:1] != ["with"]:
            return None
        end = next((i for i, w in enumerate(rest) if i and (w in _WHEN or w in _EQUALLY)), len(rest))
        whom, rest = rest[1:end], rest[end:]
        if rest[:1] and rest[0] in _EQUALLY:
            rest, equal = rest[1:], equal + 1
        phrases = self.phrases(rest)
        if equal + bool(half) != 1 or not self.one_person(whom) or phrases is None or not _heads(phrases) <= _WHEN:
            return None
        self.met = True
        return "halve", 0

    def one_person(self, words: list) -> bool:
        """Whether words name one other person: "a friend", "her little sister", "grandma", "Omar"."""
        if len(words) == 1:
            return words[0] in _ONE_PERSON or words[0] not in _COMMON and _gender(words[0]) != "?"
        return len(words) >= 2 and words[0] in ("a", "an", "the", "his", "her", "their") and \
            all(w in _ADJECTIVES | _PERSON_WORDS for w in words[1:-1]) and words[-1] in _ONE_PERSON

    def asks(self, question: list) -> bool:
        """Whether the question asks for the person's count of the things at the end: "How many shells does Nora
        have now?", "How many are left?", "So how many shells has she got in the end?" (not "did she have at
        first?", nor "does Omar have?")."""
        if "how" not in question or not set(question[:question.index("how")]) <= _TAIL | {",", "so", "and"}:
            return False
        words = question[question.index("how"):]
        if words[:2] != ["how", "many"]:
            return False
        words = words[3:] if words[2:3] == ["<OBJ>"] else words[2:]
        if words[:2] in (["are", "there"], ["are", "left"]):
            tail = words[1:] if words[1] == "left" else words[2:]
        elif len(words) >= 3 and (words[1] == "<P>" or words[1] in _SUBJECTS and self.refers(words[1])):
            verb = words[2:] if words[2:3] != ["still"] else words[3:]
            have = next((h for h in (["have"], ["end", "up", "with"], ["got"]) if verb[:len(h)] == h), [])
            if not have or (words[0] == "has") != (have == ["got"]) or words[0] not in ("does", "do", "will", "has"):
                return False
            tail = verb[len(have):]
        else:
            return False
        return set(tail) <= _TAIL


# The words a question may end with and still ask for the count at the end: "now", "left", "in the end", "at the end
# of the day", "altogether", "in all", "in total", "after all that".
_TAIL = {"now", "left", "in", "the", "end", "at", "all", "altogether", "total", "after", "that", "this", "of", "day",
         "finally", "today", "then"}


def _heads(phrases: list) -> set[str]:
    return {head for head, _ in phrases}


def _gender(word) -> str:
    """He or she by a kin word or a name of the name lists ("her brother", "Omar"); "?" when it cannot tell."""
    return _KIN.get(word) or (_GENDER.get(word.capitalize(), "?") if isinstance(word, str) else "?")


def _after_comma(before: list) -> list:
    """A subject's words: those after the last comma ("At first, Lena"), without adverbs ("Then she")."""
    if "," in before:
        before = before[len(before) - before[::-1].index(","):]
    return [w for w in before if w not in _ADVERBS]


def _plain(words: list, allow: set = frozenset(), verbs: bool = False) -> bool:
    """Whether words can be a person or a place: no number, pronoun subject, joint, modal or (unless ``verbs``, as
    in "during the break") verb."""
    return all(isinstance(w, str) and (w in allow or w not in _NO_PERSON) and (verbs or (w,) not in _VERBS)
               for w in words)


_GENDER = {**{name: "she" for name in FEMALE + HELD_OUT_FEMALE}, **{name: "he" for name in MALE + HELD_OUT_MALE}}
_NOT_NAMES = {"he", "she", "they", "it", "i", "we", "you", "there", "this", "that", "these", "those", "who", "which",
              "what"} | set(_OBJECTIVE) | set(_POSSESSIVE)
_COMMON = (_NO_PERSON | _ADVERBS | _PLACES | set(_OBJECTIVE) | set(_POSSESSIVE) | set(_NUMBER_WORDS) | _QUANTITY |
           {verb[0] for verb in _VERBS} | {"the", "a", "an", "this", "these", "those", "one"})


def _name(sentences: list) -> str | None:
    """The person asked about: the name in the question ("does Nora have"), else the one who has things at the
    start ("At first, Nora has", "Held has 2 stones": an invented name), else the story's first name (a capitalised
    word that is not an everyday word starting a sentence: "There are 5 shells in Nora's box")."""
    named = [w for w in sentences[-1][1:] if w[:1].isupper() and w != "I"]
    if named:
        return named[0] if len(named) == 1 else None
    first = sentences[0]
    verb = _verb([w.lower() for w in first], 1)
    if verb and verb[2] in ("have", "gain") and first[verb[0] - 1][:1].isupper() and \
            first[verb[0] - 1].lower() not in _NOT_NAMES:
        return first[verb[0] - 1]
    for sentence in sentences[:-1]:
        for i, word in enumerate(sentence):
            word = word[:-2] if word.endswith("'s") else word
            if word[:1].isupper() and word != "I" and (i > 0 or word.lower() not in _COMMON):
                return word
    return None


def _singular(word: str) -> set[str]:
    return {word[:-3] + "y"} if word.endswith("ies") else {word[:-2], word[:-1]} if word.endswith("es") else \
        {word[:-1]} if word.endswith("s") else set()


def _number(word) -> bool:
    return isinstance(word, str) and (word.isdigit() or word in _NUMBER_WORDS)


def _mask(sentences: list, name: str) -> list[list] | None:
    """The sentences as the reader reads them: the name as "<P>", the counted things (named by the question, else by
    the words after the first number) as "<OBJ>" where a noun stands, numbers (digits or words) as ints, the rest
    in lower case."""
    words = [[("<P>" + w[len(name):]) if w in (name, name + "'s") else w.lower() for w in sentence]
             for sentence in sentences]
    question = words[-1]
    aux = max((i for i, w in enumerate(question) if w in ("does", "do", "did", "will", "are", "were", "has")),
              default=None)                 # the last: "How many was does he have" counts things called "was"
    start = question.index("how") + 2 if "how" in question else 0
    if question[start - 2:start] != ["how", "many"] or aux is None:
        return None
    things = question[start:aux]
    if not things:
        body = [w for sentence in words[:-1] for w in sentence]
        first = next((i for i, w in enumerate(body) if _number(w)), len(body))
        for w in body[first + 1:]:
            if not w.isalpha() or w in _COMMON or w in ("more", "of", "with", "to"):
                break
            things.append(w)
    if not things or not all(w.isalpha() for w in things):
        return None
    forms = [things] + [things[:-1] + [one] for one in _singular(things[-1]) if one not in _COMMON]
    for sentence in words:
        for i in range(len(sentence) - 1, 0, -1):
            form = next((f for f in forms if sentence[i:i + len(f)] == f), None)
            if form and (_number(sentence[i - 1]) or sentence[i - 1] in _BEFORE_NOUN):
                sentence[i:i + len(form)] = ["<OBJ>"]
    return [[int(w) if w.isdigit() else _NUMBER_WORDS.get(w, w) for w in sentence] for sentence in words]


# An odd count halved ("She gives half of her 9 shells away") has no whole answer: not read (None).
_APPLY = {"start": lambda value, n: n, "add": lambda value, n: value + n, "sub": lambda value, n: value - n,
          "double": lambda value, n: value * 2, "halve": lambda value, n: value // 2 if value % 2 == 0 else None,
          "idle": lambda value, n: value}


def _word_result(prompt: str) -> int | None:
    """The person's count at the end of a word problem, read clause by clause (_Reading); None when any part of it
    cannot be read with certainty."""
    sentences, current = [], []
    for token in _TOKEN.findall(prompt.replace("\u2019", "'")):
        current.append(token)
        if token in _ENDS:
            sentences.append(current)
            current = []
    if current or len(sentences) < 2 or sentences[-1][-1] != "?" or any(s[-1] == "?" for s in sentences[:-1]):
        return None
    name = _name(sentences)
    words = _mask(sentences, name) if name else None
    if words is None:
        return None
    story, value = _Reading(_GENDER.get(name)), None
    for sentence in words[:-1]:
        for clause in _clauses(sentence[:-1]):
            op = story.clause(clause, value is not None)        # a start only first, a change only after it
            if op is None:
                return None
            value = _APPLY[op[0]](value, op[1])
            if value is None and op[0] != "idle" or value is not None and value < 0:
                return None                     # an odd half, or below zero: never trained, and no one's count
    return value if value is not None and story.asks(words[-1][:-1]) else None


def item_for(prompt: str) -> Item | None:
    """The task item a prompt asks for, read from the prompt (any prompt of a trained shape, shipped or typed), or
    None when its shape is not a task the app can check or the prompt cannot be read with certainty."""
    shape = task_shape(prompt or "")
    if shape in ("pick", "team"):
        return _choice(shape, prompt)
    result = _list_result(prompt) if shape == "list" else _word_result(prompt) if shape in ("word", "chain") \
        else None
    if result is None or (isinstance(result, list) and min(result) < 0):
        return None
    target = ", ".join(map(str, result)) if isinstance(result, list) else str(result)
    return Item(shape, prompt, "", target)


def judge(prompt: str, response: str) -> bool | None:
    """Whether ``response`` answers ``prompt`` right by its family's checker; None when the app cannot judge it."""
    item = item_for(prompt)
    return None if item is None else check(item, response)
