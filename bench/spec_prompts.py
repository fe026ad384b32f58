"""Workloads of the speculation bench: copy-heavy tasks over a passage given in the
prompt, and free chat."""

from __future__ import annotations

HARBOUR = (
    "The harbour at Kesslin was built in three stages over a little more than a century. "
    "The first stage, finished in 1842, was a single stone breakwater that sheltered a "
    "dozen fishing boats from the winter storms. Merchants soon asked for more, and in "
    "1881 the town council paid for a second arm of the breakwater, a customs house and "
    "two warehouses on the northern quay. The warehouses stored salt, timber and wool, "
    "and for thirty years the town grew rich on the trade. The third stage came after the "
    "railway reached the coast in 1911: engineers dredged the inner basin, lengthened the "
    "quays by four hundred metres and installed the steam cranes that still stand there "
    "today, painted red and no longer used. When the fishing fleet declined in the 1960s, "
    "the warehouses became workshops, then a museum, a school of boat building and a "
    "market hall that opens every Saturday. The lighthouse at the end of the breakwater "
    "was automated in 1974, and its last keeper, a man named Tobias Wren, wrote a short "
    "history of the harbour that the museum still sells. In it he describes the great "
    "storm of 1903, when the sea broke over the breakwater for two days and nights, "
    "and the whole town carried sandbags to the northern quay to save the warehouses."
)

GARDEN = (
    "To start a vegetable garden in a small yard, choose the sunniest spot you have: most "
    "vegetables need at least six hours of direct sun a day. Clear the grass and weeds, "
    "then loosen the soil to the depth of a spade and mix in two or three centimetres of "
    "compost. Raised beds help when the soil is heavy clay or full of stones; a bed of one "
    "metre by two metres is easy to reach from both sides without stepping on the soil. "
    "Begin with plants that forgive mistakes: lettuce, radishes, bush beans, courgettes "
    "and cherry tomatoes. Sow radishes and lettuce directly in the bed in early spring, "
    "and plant tomatoes and courgettes as young plants once the nights stay above ten "
    "degrees. Water deeply twice a week rather than a little every day, so the roots grow "
    "down instead of staying near the surface. A layer of straw or dry leaves between the "
    "rows keeps the soil moist and the weeds down. Pick courgettes while they are small "
    "and tomatoes when they are fully coloured, and keep notes of what you planted where: "
    "next year, move each family of plants to a different bed to keep the soil healthy."
)

CODE = '''def summarize(orders):
    """Totals per customer from a list of (customer, amount) pairs."""
    totals = {}
    for customer, amount in orders:
        if customer not in totals:
            totals[customer] = 0
        totals[customer] = totals[customer] + amount
    result = []
    for customer in sorted(totals):
        result.append((customer, round(totals[customer], 2)))
    return result


def largest(orders, count=3):
    """The customers with the largest totals, largest first."""
    ranked = sorted(summarize(orders), key=lambda pair: pair[1], reverse=True)
    return ranked[:count]
'''


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


COPY_TASKS = [
    ("quote", _chat(f"Repeat the following text exactly, word for word:\n\n{HARBOUR}")),
    ("code edit", _chat("Rename the variable `totals` to `sums` in this Python code and return the whole "
                        f"code, unchanged otherwise:\n\n```python\n{CODE}```")),
    ("extract", _chat(f"{GARDEN}\n\nCopy out, word for word, the sentences of the text above that "
                      "talk about watering and soil.")),
]

FREE_TASKS = [
    ("story", _chat("Write a short story about a fox who learns to sail.")),
    ("advice", _chat("What should I think about before adopting a dog?")),
    ("explain", _chat("Explain how a refrigerator keeps food cold.")),
]


def copy_batch(n: int) -> list[list[dict[str, str]]]:
    """``n`` distinct copy-heavy prompts (different passages and openings)."""
    passages = [HARBOUR, GARDEN]
    openings = ["Repeat the following text exactly, word for word:", "Quote this passage in full:",
                "Copy this text without changing anything:", "Write out this text again exactly:"]
    return [_chat(f"{openings[i % len(openings)]}\n\n{passages[(i // len(openings)) % 2]}") for i in range(n)]


def free_batch(n: int) -> list[list[dict[str, str]]]:
    """``n`` distinct open-ended prompts."""
    topics = ["a fox who learns to sail", "the first day at a new school", "a city under the sea",
              "a robot that paints", "a lost umbrella", "two rival bakers", "a winter in the mountains",
              "a message in a bottle"]
    return [_chat(f"Write a short story about {topics[i % len(topics)]}.") for i in range(n)]
