"""Right or wrong for any prompt the app can judge: the task item read back from the prompt, the
family's checker on every lane's answer, a wrong answer ranked as wrong (never "3rd"), and "not judged" where the
app cannot read the prompt."""
import json
import re
from itertools import islice
from pathlib import Path

import pytest

from dico.embedded import tasks
from dico.embedded.judge import item_for, judge
from dico.embedded.scope import outside, task_shape
from dico.trace import Step, Trace

ROOT = Path(__file__).resolve().parents[1]
PICK = "Pick two of these: kites, drums, hats and cups."


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_every_held_out_prompt_is_read_back_to_its_own_answer(family):
    for item in tasks.make_split(family, "test"):
        got = item_for(item.prompt)
        assert got is not None and got.family == family, item.prompt
        if family in tasks.NUMBER_FAMILIES:
            assert got.target == item.target, item.prompt
        else:
            assert (set(got.offered), got.count) == (set(item.offered), item.count), item.prompt
        assert tasks.check(got, item.answer), item.prompt         # the worked answer is right by the read item


def test_the_shipped_examples_with_a_target_are_read_to_it():
    for example in json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]:
        item = item_for(example["prompt"])
        if example.get("family") in ("word", "list") or (example["family"] == "free" and example.get("target")):
            assert item is not None and item.target == example["target"], example["prompt"]


def test_a_typed_pick_prompt_is_judged():
    assert judge(PICK, "I pick dres and dres.") is False                   # not offered, and twice
    assert judge(PICK, "I pick drums and drums.") is False                 # a repeat
    assert judge(PICK, "I pick kites and cups.") is True
    assert judge(PICK, "I pick kites, hats and cups.") is False            # three, not two
    assert judge("Choose a leader from Ann Hill, Bo Ward and Cy Ford.", "The leader is Ann Ford.") is False
    assert judge("Choose a leader from Ann Hill, Bo Ward and Cy Ford.", "The leader is Bo Ward.") is True


@pytest.mark.parametrize("prompt, answer", [
    ("Tom has 5 apples. He buys 3 more. How many apples does Tom have now?", "8"),
    ("Nora has 14 shells. She gives 3 shells to her brother. Then her brother gives Nora 2 shells. "
     "How many shells does Nora have now?", "13"),
    ("Mia has 6 pens. She doubles her pens. She loses 4 of them. How many pens does Mia have left?", "8"),
    ("The list is 4, 9, 13. Add 3 to each number.", "7, 12, 16"),
    ("Here is a list: 5, 2, 8. Multiply every number by 3.", "15, 6, 24"),
])
def test_word_problems_and_lists_are_computed(prompt, answer):
    assert item_for(prompt).target == answer


@pytest.mark.parametrize("prompt", [
    "What is the capital of France?", "Write a poem about kites.", "",
    "Tom has 5 apples and 3 pears. How many fruits does Tom have?",      # two numbers in one sentence: unsure
    "Tom has 5 apples. He juggles 2. How many apples does Tom have?",     # a change the app cannot read
    "The list is 1, 2, 3. Subtract 5 from each number.",                  # below zero: never trained, not judged
])
def test_a_prompt_the_app_cannot_read_is_not_judged(prompt):
    assert item_for(prompt) is None and judge(prompt, "The answer is 8.") is None


# Word problems as people write them, none in the family's own wording, each with its answer, all
# inside the model's scope: the judge must never give a wrong target, and may leave one unread ("Not judged"). In
# three batches: written alongside the reader (it reads 60 of 61); written after it and read once, 19 of 36, before
# the reader learnt "sends"/"lends"/"returns", bought for someone, "gives ... back", a verb left out ("gives 6 to
# Sara and 4 to Ben"), "for his birthday" and "the next game" (now 28); written last and not tuned on (21 of 30).
PEOPLES_WORD_PROBLEMS = [
    ("Lena has 12 pencils. She gives 4 pencils to Omar and then buys 7 more. How many pencils does Lena have now?", 15),
    ("Tom had 9 marbles. He lost 3 of them at school, and then his sister gave him 5. How many marbles does "
     "Tom have now?", 11),
    ("Mia has 20 stickers. She gives away 6 and later finds 2 more. How many stickers does Mia have?", 16),
    ("Ben starts with 15 coins. He spends 8 of them on lunch. Then he earns 4 more. How many coins does he "
     "have left?", 11),
    ("Anna has 7 apples. Her mother gives her 5 more apples, and Anna eats 2. How many apples does Anna have now?", 10),
    ("Nora has 14 shells. Her brother takes 3 of them. How many shells does Nora have left?", 11),
    ("Max has 25 cards. He sells 10 cards to a friend, then buys 4 more at the shop. How many cards does Max "
     "have in the end?", 19),
    ("Zoe has 8 cookies. She eats 3 cookies after lunch. Later her grandma gives her 6 more. How many cookies "
     "does Zoe have now?", 11),
    ("Emma has 30 stickers. She uses 12 stickers on a poster. How many stickers does Emma have left?", 18),
    ("Omar owns 16 toy cars. He gives 5 toy cars to his cousin. Later, he gets 3 more toy cars from his dad. "
     "How many toy cars does Omar have now?", 14),
    ("Ruby has 10 flowers. She picks 6 more in the garden and gives 4 to her mother. How many flowers does she "
     "have now?", 12),
    ("Jack has 4 books. He doubles his books. Then he donates 3 of them to the library. How many books does "
     "Jack have?", 5),
    ("Ivan has 13 eggs. He drops 2 eggs on the floor. Then he buys 6 more eggs at the market. How many eggs "
     "does Ivan have now?", 17),
    ("Sara has 18 candies. She eats five of them and gives three to her friend. How many candies does Sara "
     "have left?", 10),
    ("At the start of the day, Paul has 22 pencils. He loses 4 pencils at school. After school, he buys 10 "
     "more. How many pencils does Paul have at the end of the day?", 28),
    ("Hugo had 5 marbles. He won 7 more marbles in a game, then lost 2. How many marbles does Hugo have now?", 10),
    ("Ada has 9 coins. Her father gives her 9 more coins. How many coins does Ada have altogether?", 18),
    ("Leo has 6 kites. The next day, the number of kites doubles. He gives 2 kites to Jack. How many kites "
     "does Leo have now?", 10),
    ("Lily had 35 beads. She lost 5 beads on the bus and found 3 of them later. How many beads does Lily have "
     "now?", 33),
    ("Lena has 3 notebooks. She buys 2 more notebooks and her aunt gives her 4 more. How many notebooks does "
     "Lena have now?", 9),
    ("Tom has 7 stamps. A friend gives Tom 8 stamps. Tom then doubles his stamps. How many stamps does Tom "
     "have now?", 30),
    ("Mia has 16 crayons. She loses 4 of her crayons at school. How many crayons does Mia have left?", 12),
    ("Nina has 10 cupcakes. She sells 4 cupcakes at the bake sale and eats 1. How many cupcakes does Nina have "
     "left?", 5),
    ("Max had 20 coins. He gave 5 coins to his sister and spent 6 coins at the shop. How many coins does Max "
     "have now?", 9),
    ("Zoe has 11 shells. On Monday she finds 4 more shells. On Tuesday she gives 3 shells to her friend. How "
     "many shells does Zoe have now?", 12),
    ("Ben has 5 toy cars. His grandpa gives him 5 more toy cars, and then Ben gives 2 toy cars to his cousin. "
     "How many toy cars does Ben have now?", 8),
    ("Emma has 8 flowers. She picks up 7 more flowers in the park. She then gives 5 flowers to her teacher. "
     "How many flowers does Emma have?", 10),
    ("Jack collects stickers. He has 14 stickers. He gets 6 more from his friend. How many stickers does Jack "
     "have now?", 20),
    ("Sara has 9 pencils. She is given 4 more pencils by her teacher. How many pencils does Sara have now?", 13),
    ("Omar has 6 cookies. He bakes 6 more. Then he eats 4 of them. How many cookies does Omar have?", 8),
    ("Lena has 5 apples. She buys 3 apples at the market. She eats 2 of them on the way home. How many apples "
     "does Lena have now?", 6),
    ("Anna has 13 books. Anna's aunt gives her 7 books. Anna gives 5 books to the school library. How many "
     "books does Anna have now?", 15),
    ("Leo had 10 stickers. Yesterday he gave 3 stickers to Mia, and today he bought 8 more. How many stickers "
     "does Leo have now?", 15),
    ("Paul has 2 kites. His kites double. Then he buys 1 more kite. How many kites does Paul have now?", 5),
    ("Sam has 17 coins. Sam loses 2 coins, then Sam finds 9 coins. How many coins does Sam have in total?", 24),
    ("Tom has 21 pencils. He uses up 6 pencils at school. How many pencils does Tom have left?", 15),
    ("Nora has 3 shells. Grandma gives her 4 shells and then she doubles her shells. How many shells does Nora "
     "have now?", 14),
    ("Lily has 12 beads. She throws 3 beads away. How many beads does Lily have left?", 9),
    ("Zoe had 30 stickers. She sold 10 stickers to her friends and then received 4 stickers from her aunt. How "
     "many stickers does Zoe have now?", 24),
    ("Ben has 8 marbles. He wins 4 marbles from Sam and loses 3 marbles to Max. How many marbles does Ben have "
     "now?", 9),
    ("Omar has 9 apples. He eats one apple and gives two apples to his sister. How many apples does Omar have now?", 6),
    ("Lena has 12 pencils. She gives 4 pencils to Omar. After that, she buys 7 more pencils. How many pencils "
     "does Lena have now?", 15),
    ("Max has 7 balloons. Later he has twice as many balloons as before. How many does he have?", 14),
    ("Ivan has 40 stamps. He gives 10 stamps away and sells 5. How many stamps does Ivan have left?", 25),
    ("Sara has 13 flowers. Her mom gives her 2 more flowers. Then Sara gives 5 flowers to her grandma. How "
     "many flowers does Sara have in the end?", 10),
    ("Hugo has 6 coins. He finds 4 coins under his bed. How many coins does Hugo have now?", 10),
    ("Paul has 18 stickers. He gives his sister 6 stickers. How many stickers does Paul have now?", 12),
    ("Ruby has 11 stones. She collects 5 more stones at the beach. How many stones does Ruby have now?", 16),
    ("Mia has 15 cards. She has lost 3 cards and has found 2 more. How many cards does Mia have now?", 14),
    ("There are 9 eggs in Ada's basket. She eats 2 of them for breakfast. How many eggs does Ada have left?", 7),
    ("Jack has 6 toy soldiers. His father gives him 6 more, and later Jack loses 5 toy soldiers in the garden. "
     "How many toy soldiers does Jack have now?", 7),
    ("Lily has 20 stamps. Lily gives 8 stamps to Nina. Nina gives 4 stamps to Lily. How many stamps does Lily "
     "have now?", 16),
    ("Sam has 10 cookies. He gives 4 cookies to his friend. He buys 2 more cookies. How many cookies does Sam "
     "have now?", 8),
    ("Emma has 24 crayons. She gives 6 of them to her sister and 4 to her brother. How many crayons does Emma "
     "have left?", 14),
    ("Ivan has 12 marbles. He gets 5 marbles for his birthday. How many marbles does Ivan have now?", 17),
    ("Sam has 12 balloons. Two of them pop. How many balloons does Sam have left?", 10),
    ("Nora has 14 shells. She gives 3 shells to her sister. She buys 2 more. How many shells does Nora have now?", 13),
    ("Sam has 10 stickers. They give 3 stickers to a friend and then buy 5 more. How many stickers do they "
     "have now?", 12),
    ("Nina has 16 cards. She gets rid of 5 of those. How many cards does Nina have now?", 11),
    ("Leo has 9 apples. He has eaten 4 of them. How many apples does Leo have left?", 5),
    ("Ada has 5 coins. Her coins are doubled. Then she spends 3 coins. How many coins does Ada have?", 7),
    # written after the reader
    ("Ruby has 15 marbles. She loses 4 marbles playing with her friends. How many marbles does Ruby have now?", 11),
    ("Omar had 20 cookies. He ate 6 cookies and gave 5 to his little brother. How many cookies does Omar have "
     "left?", 9),
    ("Nina has 8 pencils. Her teacher gives her 4 new pencils. Then Nina loses 1 pencil. How many pencils does "
     "Nina have now?", 11),
    ("Jack has 12 toy cars. He sells 3 toy cars at the yard sale. Then his grandma buys him 5 more toy cars. "
     "How many toy cars does Jack have now?", 14),
    ("Anna has 6 books. On her birthday she gets 6 more books. How many books does Anna have now?", 12),
    ("Max has 30 stamps. He gives 10 stamps to Leo. Leo then gives Max 2 stamps back. How many stamps does Max "
     "have now?", 22),
    ("Zoe has 5 shells. At the beach she finds 9 more shells, but she drops 3 of them on the way home. How "
     "many shells does Zoe have now?", 11),
    ("Ben has 14 coins. He spends 5 coins on a toy and then finds 2 coins on the street. How many coins does "
     "Ben have now?", 11),
    ("Leo has 7 apples. His mom doubles the number of apples he has. How many apples does Leo have now?", 14),
    ("Emma has 9 flowers. She picks 5 more flowers and gives 3 flowers to her grandma. How many flowers does "
     "Emma have now?", 11),
    ("Sara had 16 candies. She gave 4 candies to her friend Lily and ate 2 herself. How many candies does Sara "
     "have left?", 10),
    ("Paul has 25 cards. He loses 5 cards in a game, then wins 8 cards in the next game. How many cards does "
     "Paul have now?", 28),
    ("Mia has 10 stickers. Her friend Nora gives her 3 stickers, and Mia gives Nora 1 sticker. How many "
     "stickers does Mia have now?", 12),
    ("Ivan has 4 books. The library gives him 2 more books. Later he returns 1 book. How many books does Ivan "
     "have now?", 5),
    ("Hugo has 11 eggs. He uses 3 eggs for breakfast and 2 eggs for lunch. How many eggs does Hugo have left?", 6),
    ("Tom has 8 stamps. He buys 4 more stamps at the post office, then doubles his stamps. How many stamps "
     "does Tom have now?", 24),
    ("Ada has 17 shells. She gives 7 shells to Ruby. How many shells does Ada still have?", 10),
    ("Nora has 6 cookies. She gets 6 more cookies from her aunt. Now she has twice as many cookies. How many "
     "cookies does Nora have now?", 12),
    ("Sam had 10 marbles. Sam's brother took 4 of his marbles. How many marbles does Sam have now?", 6),
    ("Ben had 5 toy cars. For his birthday he got 3 more toy cars from his uncle. How many toy cars does Ben "
     "have now?", 8),
    ("Ruby has 20 stickers. She gives 5 stickers to Zoe and 5 stickers to Mia. How many stickers does Ruby "
     "have left?", 10),
    ("Omar has 3 apples. He picks 9 more apples from the tree. He eats 2 apples. How many apples does Omar "
     "have now?", 10),
    ("Max has 9 balloons. 2 balloons fly away. How many balloons does Max have now?", 7),
    ("Emma had 14 flowers. She gave 6 flowers to her mom. Her dad gave her 3 flowers. How many flowers does "
     "Emma have now?", 11),
    ("Sara has 7 books. Her aunt sends her 5 books in the mail. How many books does Sara have now?", 12),
    ("Anna has 22 stamps. She loses 2 stamps, and her brother gives her 10 stamps. How many stamps does Anna "
     "have altogether?", 30),
    ("Jack has 5 marbles. Jack wins 5 marbles, and then he wins 5 more. How many marbles does Jack have?", 15),
    ("Hugo has 8 pencils. He breaks 2 of his pencils and buys 4 new ones. How many pencils does Hugo have now?", 10),
    ("Nina has 6 cookies. Her mother bakes 6 more cookies for her. How many cookies does Nina have now?", 12),
    ("Paul has 40 coins. He spends 12 coins on lunch and 8 coins on a book. How many coins does Paul have left?", 20),
    ("Tom has 13 shells. Tom's sister gives Tom 7 shells. Tom drops 5 shells in the sand. How many shells does "
     "Tom have now?", 15),
    ("Ada has 11 stickers. Later that day, she gets 4 more stickers. How many stickers does Ada have at the "
     "end of the day?", 15),
    ("Mia has 2 books. She doubles her books, then doubles them again. How many books does Mia have?", 8),
    ("Ivan has 10 eggs. He cracks 3 eggs to make an omelette. How many eggs does Ivan have left?", 7),
    ("Lena has 16 candies. She eats 4 candies, and her friend gives her 2 more candies. How many candies does "
     "Lena have now?", 14),
    ("Sam has 9 pencils. He lends 3 pencils to Ben. How many pencils does Sam have now?", 6),
    # written last, not tuned on
    ("Leo has 14 marbles. He gives 6 marbles to his best friend. How many marbles does Leo have now?", 8),
    ("Nina had 7 stickers. She got 8 more stickers at school today. How many stickers does Nina have?", 15),
    ("Ben has 6 books. His aunt gives him 3 books and his uncle gives him 2 books. How many books does Ben "
     "have now?", 11),
    ("Ruby collects shells. She has 9 shells. At the beach she finds 7 more. How many shells does Ruby have now?", 16),
    ("Max has 18 cards. He loses 3 cards and gives 5 cards to his brother. How many cards does Max have left?", 10),
    ("Mia had 24 stickers. She used 9 stickers to decorate her notebook. How many stickers does Mia have left?", 15),
    ("Omar has 8 toy cars. His dad buys him 4 more toy cars. Then Omar gives 3 toy cars to his friend. How "
     "many toy cars does Omar have now?", 9),
    ("Jack had 11 stamps. He bought 6 stamps and then sold 4 stamps. How many stamps does Jack have now?", 13),
    ("Lily has 3 candies. She wins 5 candies in a contest, then her mom gives her 2 candies. How many candies "
     "does Lily have?", 10),
    ("Paul has 30 marbles. He loses 12 marbles in a game. How many marbles does he have now?", 18),
    ("Ada has 9 eggs. She buys a dozen eggs. How many eggs does Ada have now?", 21),
    ("Hugo has 4 kites. He doubles the number of kites he has. How many kites does Hugo have now?", 8),
    ("Ivan has 15 coins. He spends 7 coins at the store and finds 3 coins on the way home. How many coins does "
     "Ivan have left?", 11),
    ("Nora has 5 shells. Her friend gives her 5 shells too. How many shells does Nora have now?", 10),
    ("Sam has 22 stickers. Sam gives 11 stickers to Lily. Lily then gives 4 stickers to Sam. How many stickers "
     "does Sam have now?", 15),
    ("Lena has 10 books. She donates 4 books to the school. Then she buys 2 new books. How many books does "
     "Lena have now?", 8),
    ("Max has 6 apples. He picks 6 more apples from the tree, so now he has 12. How many apples does Max have?", 12),
    ("Zoe has 13 flowers. 3 of her flowers die. How many flowers does Zoe have now?", 10),
    ("Ben has 2 marbles. He wins 3 marbles. He wins 4 more marbles. He loses 1 marble. How many marbles does "
     "Ben have now?", 8),
    ("Emma has 20 candies. She gives 5 candies to her sister and keeps the rest. How many candies does Emma "
     "have now?", 15),
    ("Jack has 8 coins. His mom gives him 8 coins, so he has twice as many coins. How many coins does Jack have?", 16),
    ("Mia has 17 pencils. She lost 2 pencils at school and her friend gave her 1 pencil. How many pencils does "
     "Mia have now?", 16),
    ("Omar had 9 cookies. After lunch, he ate 4 of the cookies. How many cookies does Omar have left?", 5),
    ("Ruby has 7 toy cars. Ruby's dad gives her 7 more. How many toy cars does Ruby have in all?", 14),
    ("Paul has 11 cards. He gets 4 cards from Sam and gives 2 cards to Leo. How many cards does Paul have?", 13),
    ("Lily had 5 balloons. She bought 5 more balloons, and then 2 balloons popped. How many balloons does Lily "
     "have?", 8),
    ("Hugo has 19 marbles. He gives 4 marbles to Tom and 4 marbles to Ben. How many marbles does Hugo have left?", 11),
    ("Nina has 12 cookies. She eats 1 cookie every day for 3 days. How many cookies does Nina have left?", 9),
    ("Ada has 8 flowers. She gets 4 more flowers from her garden. Then she gives 6 flowers to her teacher. How "
     "many flowers does Ada have now?", 6),
    ("Leo has 10 pencils. Leo's sister borrows 3 pencils. How many pencils does Leo have now?", 7),
]
PEOPLES_READ = 109     # of the 127 read now: raise it when the reader reads more
# Word problems the scope check accepts that must not be judged: a question about another person, other things or
# another quantity; two people changing the count or one whose gift could go either way; an unknown verb, a number
# with no operation, a result below zero; a pronoun that may mean someone else; a summing-up that would read as a
# change ("so now he has twice as many"); words of quantity ("some", "half", "each", "every day").
NOT_JUDGED = [
    "Lena has 12 pencils and Omar has 5 pencils. Lena gives Omar 3 pencils. How many pencils does Omar have now?",
    "Tom has 10 marbles. He gives some to his friend. How many marbles does Tom have now?",
    "Mia has 8 apples. She trades 3 apples for 2 pears. How many apples does Mia have?",
    "Ben has 6 cards. He and his sister each buy 4 more cards. How many cards does Ben have?",
    "Anna has 15 stickers. Her sister has 3 more stickers than Anna. How many stickers does Anna have now?",
    "Sam has 7 coins. He wants to buy 3 more. How many coins does Sam have now?",
    "Nora has 14 shells. She gives 3 shells to her brother. He gives 2 back. How many shells does Nora have now?",
    "Max has 5 books. He loses 8 books. How many books does Max have now?",
    "Lena has 12 pencils. She buys 4 pens. How many pencils does Lena have now?",
    "Lena has 12 pencils. She gives 4 pencils to Omar. How many pencils does Omar have now?",
    "Lena has 12 pencils. She gives 4 pencils to Omar. How many pencils did Lena give away?",
    "Zoe has 9 candies. She eats half of them. How many candies does Zoe have left?",
    "Leo has 3 boxes of 6 crayons. He loses 2 crayons. How many crayons does Leo have now?",
    "Emma has 10 cookies. She gives 2 cookies to each of her 3 friends. How many cookies does Emma have left?",
    "Jack has 20 stamps. His brother loses 5 stamps. How many stamps does Jack have now?",
    "Ruby and Ada have 16 flowers. Ruby gives 4 flowers to her mother. How many flowers does Ruby have now?",
    "Omar has 12 marbles. Sara has 8 marbles. She gives him 3. How many marbles does Omar have now?",
    "Ivan has 4 kites. He buys 4 more kites, so now he has twice as many. How many kites does Ivan have now?",
    "Ivan has 4 kites. He buys 4 more kites. Now he has twice as many kites as before. How many kites does "
    "Ivan have now?",
    "Paul has 11 coins. He finds a few more coins. How many coins does Paul have now?",
    "Lena has 12 pencils. Omar gives Lena 3 pencils. He loses 2 pencils. How many pencils does Lena have now?",
    "Mia has 10 stickers. She gives 4 stickers to Sara, and she gives her 2 stickers back. How many stickers "
    "does Mia have now?",
    "Omar gives Lena 5 pencils. She loses 2 pencils. How many pencils does Lena have now?",
    "Mia has 12 cookies. She eats 3 cookies, and her brother eats 2 more. How many cookies does Mia have now?",
    "Tom has 8 apples. He buys 3 more apples if it rains. How many apples does Tom have now?",
    "Tom has 8 apples. He does not buy 3 more apples. How many apples does Tom have now?",
    "Lena has 12 pencils. She gives 4 pencils to Omar and then buys 7 more. How many pencils does she need?",
    "Ben has 9 cards. He gives 2 cards to Max. Max gives 3 cards to Sam. How many cards does Ben have now?",
    "Hugo has 5 coins. He gives 2 coins to his friend for 3 stickers. How many coins does Hugo have now?",
    "Ada has 10 eggs. She uses 4 eggs. How many eggs did Ada use?",
    "Lena has 12 pencils. Sara has 6 pencils. Lena buys 3 more. How many pencils does Lena have now?",
    "Lena has 12 pencils. She gives Omar 4 pencils, and he gives her 2. How many pencils does Lena have now?",
    "Lena has 12 pencils. Her friend gives her 4 pencils. She gives 2 pencils to her. How many pencils does "
    "Lena have now?",
    "Lena has 12 pencils. She buys 3 more at the shop every day. How many pencils does Lena have now?",
    "Lena has 12 pencils. She buys 3 packs of pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. Omar doubles his pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. Her pencils double in price. How many pencils does Lena have now?",
    "Lena has 12 pencils. Omar gives her 4 of his pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. She will buy 3 more tomorrow. How many pencils does Lena have now?",
    "Lena has 12 pencils. She buys 3 more and gives them to Omar. How many pencils does Lena have now?",
    "Lena has 12 pencils. Her brother gives her 4 more pencils, and he gives her sister 2. How many pencils "
    "does Lena have now?",
    "Lena and her brother have 12 pencils. They buy 3 more. How many pencils do they have?",
    "Lena has 12 pencils. She gives 4 pencils to Omar. They buy 3 more. How many pencils does Lena have?",
    "Tom has 5 apples. He buys 3 more apples for his sister. How many apples does Tom have now?",
    "Tom has 5 apples. He buys 3 more apples, and his sister buys 2 more. How many apples does Tom have now?",
    "Lena has 6 pencils. Later she has twice as many pencils as Omar. How many pencils does Lena have now?",
    "Lena has 12 pencils. She buys 3 more. Her brother buys twice as many. How many pencils does Lena have now?",
    "Lena has 12 pencils. She keeps 5 and gives the rest to Omar. How many pencils does Lena have now?",
    "Lena has 12 pencils. She buys 3 more, so she has 15. How many pencils does Lena have now?",
    "Lena has 12 pencils. She gives Omar 3 pencils. He buys 2 more. How many pencils does Lena have now?",
    "Lena has 12 pencils. Omar takes 3 of his pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. She gives 3 pencils to Omar and Sara. How many pencils does Lena have now?",
    "Lena has 12 pencils. She loses 2 pencils a day for 3 days. How many pencils does Lena have now?",
    "Lena has 12 pencils. Both of her friends give her 3 pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. She doesn't lose 3 pencils. How many pencils does Lena have now?",
    "Lena has 12 pencils. She loses 3 of her pens. How many pencils does Lena have now?",
    "Lena has 12 pencils. She gives 4 pencils to Omar. The number of pencils doubles. How many pencils does "
    "Omar have now?",
    "Lena has 12 pencils. She is 9 years old. How many pencils does Lena have now?",
]


def test_word_problems_as_people_write_them_are_read_right_or_not_at_all():
    read = 0
    for prompt, answer in PEOPLES_WORD_PROBLEMS:
        assert task_shape(prompt) == "word" and not outside(prompt), prompt     # inside the model's scope
        item = item_for(prompt)
        assert item is None or item.target == str(answer), prompt              # never a wrong target
        read += item is not None
    assert read >= PEOPLES_READ, f"{read} of {len(PEOPLES_WORD_PROBLEMS)} read"


@pytest.mark.parametrize("prompt", NOT_JUDGED)
def test_a_word_problem_that_could_be_read_two_ways_is_not_judged(prompt):
    assert task_shape(prompt) == "word" and item_for(prompt) is None


def test_the_family_s_training_problems_are_read_to_their_targets():
    items = list(islice(tasks.train_stream(0, families=("word",), copy_drills=False), 2000))
    got = [item_for(item.prompt) for item in items]
    assert all(read is None or read.target == item.target for read, item in zip(got, items))
    # Left unread, never read wrong: a draw whose other person is the asked-about one ("Then she gives 3 medals to
    # Carla", Carla herself), an invented name that is an everyday word ("They counts 18 altruistic") or a name of
    # the other gender ("Joy ... Later he has"; after someone else has appeared, "he" may be them).
    assert sum(read is None for read in got) <= len(items) // 500


# ----------------------------------------------------------------------------- long word problems (chain)

def test_every_held_out_chain_problem_is_read_and_judged():
    """The chain family's 500 long problems (4 to 8 changes, halving among them) are read to their targets: the
    page judges every lane's answer to them, a wrong one wrong."""
    for item in tasks.make_split("chain", "test"):
        got = item_for(item.prompt)
        assert got is not None and (got.family, got.target) == ("chain", item.target), item.prompt
        assert judge(item.prompt, item.answer) is True, item.prompt
        assert judge(item.prompt, f"The answer is {int(item.target) + 1}.") is False, item.prompt


def test_the_chain_family_s_training_problems_are_read_to_their_targets():
    stream = tasks.train_stream(0, families=("chain",), mix=(("chain", 1),))
    items = list(islice((item for item in stream if item.family == "chain"), 5000))     # copy drills skipped
    got = [item_for(item.prompt) for item in items]
    assert all(read is None or read.target == item.target for read, item in zip(got, items))
    # Left unread, never read wrong: 1 of the first 5,000, a draw whose other person is the asked-about one ("Garrett
    # owns 54 jewels. ... He gives half of his jewels to Garrett": to himself?).
    assert sum(read is None for read in got) <= len(items) // 1000


# Long problems with halving as a visitor may type them (none in the family's exact wording), each with its answer.
PEOPLES_CHAIN_PROBLEMS = [
    ("Lena has 12 pencils. She buys 4 more. She gives half of them to her sister. Then she finds 3 more. She loses "
     "2 pencils. She doubles her pencils. How many pencils does Lena have now?", 18),
    ("Tom has 20 marbles. He shares them equally with his brother. He wins 6 more. He loses 3 of them. He buys 5 "
     "more. He halves his marbles. How many marbles does Tom have now?", 9),
    ("Mia has 30 stickers. She sells half of her stickers at the market. She gets 5 more. She gives 4 stickers to "
     "Omar. Then she loses half of them. She buys 9 more. How many stickers does Mia have left?", 17),
    ("Ben has 16 coins. He gives half of them to a friend. He finds 2 more coins. He spends 4 coins. His coins are "
     "doubled. He splits them evenly with Omar. How many coins does Ben have now?", 6),
    ("Zoe has 40 shells. She gives away half of her shells. She finds 10 more. She loses half. She buys 3 more. She "
     "shares them equally with her best friend. How many shells does Zoe have?", 9),
    ("Nora has 18 cards. She shares half of them with her cousin. She buys 6 more. She loses 5 cards. She eats half "
     "of them. Her mother gives her 2 more. How many cards does Nora have in the end?", 7),
    ("Sam has 24 apples. He gives his sister half of his apples. He buys 8 more. Then he eats 2. He doubles his "
     "apples. He gives 6 to his friend. How many apples does Sam have now?", 30),
    ("Omar has 10 cookies. The number of cookies halves. He bakes 7 more. He eats 4. He buys 6 more. He eats half "
     "of them. How many cookies does Omar have now?", 7),
    ("Ada has 20 stamps. Her brother takes half of her stamps. She buys 4 more. She finds 4 more. She loses 2 "
     "stamps. She gave half of her stamps away. How many stamps does Ada have now?", 8),
]


@pytest.mark.parametrize("prompt, answer", PEOPLES_CHAIN_PROBLEMS)
def test_long_problems_with_halving_as_people_write_them_are_read(prompt, answer):
    assert task_shape(prompt) == "chain" and outside(prompt) == [], outside(prompt)
    item = item_for(prompt)
    assert item is not None and (item.family, item.target) == ("chain", str(answer))
    assert judge(prompt, f"The answer is {answer}.") is True and judge(prompt, f"The answer is {answer * 2}.") is False


TAIL = " She buys 4 more. She finds 3 more. She loses 2 pencils. She finds 5 more. How many pencils does Lena have now?"


@pytest.mark.parametrize("halving", [
    "She buys 3 more. She gives half of them to her sister.",        # 15: an odd half has no whole answer
    "She shares them equally with her friends.",                      # with how many?
    "She shares them with her sister.",                               # not said equally: how many?
    "She shares them equally with 3 friends.",                        # a third of them, never trained
    "Her brother gives her half of his pencils.",                     # half of his count, unknown
    "She gets half of them.",                                         # half of what?
    "She keeps half of them.",                                        # and the rest?
    "She finds half as many.",
    "She shares them equally with Lena.",                             # with herself
    "She gives half of them to herself.",
    "She sells half of Omar's pencils.",
])
def test_a_halving_that_cannot_be_read_with_certainty_is_not_judged(halving):
    prompt = "Lena has 12 pencils. " + halving + TAIL
    assert task_shape(prompt) == "chain" and item_for(prompt) is None and judge(prompt, "The answer is 8.") is None


def test_long_problems_are_of_chain_shape_and_word_problems_stay_word_problems():
    for family in ("chain", "word"):
        for item in tasks.make_split(family, "test"):
            assert task_shape(item.prompt) == family and outside(item.prompt) == [], item.prompt


@pytest.mark.parametrize("prompt, reason", [
    ("Tom has 5 apples. He buys 1. He doubles his apples. He buys 3. He halves them. He buys 4. He buys 5. He buys "
     "6. He buys 7. He buys 8. How many apples does Tom have?",
     "9 changes; long word problems were trained with 4 to 8"),
    ("Tom has 90 apples. He buys 1. He buys 2. He buys 3. He buys 4. He buys 5. How many apples does Tom have?",
     "long word problems were trained to start from 2 to 60"),
    ("Tom has 5 apples. He buys 1. He buys 2. He triples them. He buys 4. He buys 5. How many apples does Tom have?",
     "only adding, taking away, doubling and halving were trained"),
    ("Tom has 5 apples. He buys 1. He buys 2. He buys 3. He buys 4. He shares them with 3 friends. How many apples "
     "does Tom have?", "only adding, taking away, doubling and halving were trained"),
    ("Tom has 5 apples. He buys 1. He buys 2. He buys 3. He buys 4. He buys 250. How many apples does Tom have?",
     "numbers above 200"),
    ("Zoe has 10 candies. She eats half of them. How many candies does Zoe have left?",
     "halving was trained only in long word problems of 4 to 8 changes"),
    ("Tom has 9 apples. He shares them with 3 friends. How many apples does each friend get?",
     "only adding, taking away and doubling were trained"),
])
def test_long_problems_outside_the_trained_ranges_are_told_why(prompt, reason):
    assert any(reason in why for why in outside(prompt)), outside(prompt)


def test_a_model_without_long_problems_calls_one_a_word_problem_of_too_many_changes():
    prompt = tasks.make_split("chain", "test")[0].prompt
    older = ("word", "list", "pick", "team")
    assert outside(prompt) == [] and any("changes; word problems were trained with 1 to 3" in why
                                         for why in outside(prompt, older))
    assert "halving was never trained" in outside("Zoe has 10 candies. She eats half of them. How many candies does "
                                                  "Zoe have left?", older)


def _lane(label: str, text: str, nfe: int) -> Trace:
    """A one-position lane that committed its answer at its last step."""
    steps = [Step(index=i, phase="vanilla", window=[0, 1], committed=[0] if i == nfe - 1 else [],
                  tokens=[1] if i == nfe - 1 else [], confidence=[0.9], prediction=[1]) for i in range(nfe)]
    return Trace(model="m", method="vanilla", mode="non-ar", settings={}, prompt=PICK, prompt_length=1, gen_length=1,
                 block_length=None, text=text, nfe=nfe, vocab={"1": text}, steps=steps, label=label, answer_length=1,
                 answer_nfe=nfe)


def test_a_wrong_answer_is_marked_wrong_and_takes_no_place():
    from dico_ui import render
    lanes = [(_lane("Fast", "I pick kites and cups.", 3), 2, "done"), (_lane("Top-4", "I pick dres and dres.", 2), 1,
             "done"), (_lane("Vanilla", "I pick hats and drums.", 9), 8, "done")]
    assert render.verdicts(lanes) == [True, False, True]
    html = render.lanes_html(lanes)
    cards = re.split(r'<div class="lane[ "]', html)[1:]
    assert 'class="place">1st' in cards[0] and 'class="place">2nd' in cards[2]   # Vanilla 2nd, not 3rd
    assert "wrong answer" in cards[1] and "place" not in cards[1]
    assert "Not judged" not in html


def test_a_prompt_that_cannot_be_judged_says_so_once_it_finishes():
    from dico_ui import render
    lane = _lane("Vanilla", "Kites fly.", 2)
    lane.prompt = "Write a poem about kites."
    assert "Not judged" in render.lanes_html([(lane, 1, "done")]) and "verdict" not in render.lanes_html(
        [(lane, 1, "done")])
    assert "Not judged" not in render.lanes_html([(lane, 0, "decoding")])
