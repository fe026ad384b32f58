"""Extraction prompts for structured output on SmolLM2: four JSON Schemas (nested
objects, enums, arrays, required fields, patterns and ranges), five texts each.
Strings and arrays are bounded and objects closed (``additionalProperties: false``),
so every output is complete within a known length."""

from __future__ import annotations

NAME = {"type": "string", "maxLength": 40}
PERSON = {
    "type": "object",
    "properties": {
        "name": NAME,
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": NAME,
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 4},
    },
    "required": ["name", "age", "city", "hobbies"],
    "additionalProperties": False,
}
EVENT = {
    "type": "object",
    "properties": {
        "title": NAME,
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "category": {"enum": ["meeting", "concert", "sports", "conference", "party"]},
        "place": {"type": "object", "properties": {"city": NAME, "country": NAME}, "required": ["city", "country"],
                  "additionalProperties": False},
    },
    "required": ["title", "date", "category", "place"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "customer": NAME,
        "items": {
            "type": "array", "minItems": 1, "maxItems": 4,
            "items": {"type": "object", "required": ["product", "quantity"], "additionalProperties": False,
                      "properties": {"product": NAME, "quantity": {"type": "integer", "minimum": 1, "maximum": 999}}},
        },
        "express": {"type": "boolean"},
    },
    "required": ["customer", "items", "express"],
    "additionalProperties": False,
}
REVIEW = {
    "type": "object",
    "properties": {
        "sentiment": {"enum": ["positive", "negative", "neutral"]},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "topics": {"type": "array", "items": {"enum": ["price", "quality", "delivery", "service", "design"]},
                   "maxItems": 5},
        "summary": {"type": "string", "maxLength": 60},
    },
    "required": ["sentiment", "rating", "topics", "summary"],
    "additionalProperties": False,
}

EXTRACTIONS: list[tuple[dict, str]] = [
    (PERSON, "Maria Lopez is 34 years old, lives in Madrid and loves painting and hiking."),
    (PERSON, "Meet Tom, a 12-year-old boy from Chicago who plays chess."),
    (PERSON, "Dr. Aiko Tanaka (58) works in Kyoto. In her free time she gardens, reads and swims."),
    (PERSON, "Our new neighbour Paul Martin moved from Lyon; he turned 41 last week and collects stamps."),
    (PERSON, "Grandma Edith, 90, still lives in Dublin and enjoys knitting."),
    (EVENT, "The annual Jazz Night takes place on 2025-07-14 in Montreal, Canada."),
    (EVENT, "Board meeting: March 3rd 2024 at the Berlin office in Germany."),
    (EVENT, "Join us for Sara's 30th birthday party in Austin, USA on 2024-11-02!"),
    (EVENT, "The Tokyo Marathon, Japan, will be run on 2026-03-01."),
    (EVENT, "PyCon Italia 2024 is a conference held in Florence, Italy, from 2024-05-22."),
    (ORDER, "Hi, this is John Smith. Please send me 2 laptops and 3 mice by express shipping."),
    (ORDER, "Order for Alice Brown: one coffee machine, standard delivery."),
    (ORDER, "Customer Wei Chen wants 10 notebooks, 5 pens and 1 stapler. No rush."),
    (ORDER, "Express order please: 4 bags of rice for Fatima Khan."),
    (ORDER, "Bob needs 12 chairs and 2 tables for his cafe, shipped normally."),
    (REVIEW, "Great phone, beautiful design and fast delivery. Five stars!"),
    (REVIEW, "The shoes fell apart after a week. Terrible quality and the price was too high."),
    (REVIEW, "It's an okay blender. Does the job, nothing special. Three out of five."),
    (REVIEW, "Customer service was very helpful when my package was late. I'd rate it 4."),
    (REVIEW, "Worst purchase ever: broken on arrival, and support never answered. One star."),
]
