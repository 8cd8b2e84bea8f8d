"""Deterministic, diverse instructions for self-distilling draft models, in two disjoint splits.

bench/README.md ("A first attempt"): a first Medusa trained on 30 templates x 10 topics learnt the templates, not the
target (41 % head-0 top-1 on its own templates, 19.5 % on new prompts). This generator varies task types,
phrasings, topics, lengths and styles, and keeps a held-out split that shares NO task template and NO
topic with training:

* every task family has its own phrasing templates; a fixed share of them (and whole families: haiku,
  product descriptions, quizzes, tweets, analogies, ...) are held out;
* every content pool (topics, characters, places, Python tasks, code snippets, paragraphs, sentences,
  questions, term lists, ...) is split once, deterministically; held-out prompts draw only from the
  held-out part; topics are a single shared pool so one topic never lands on both sides;
* phrasing decorations (politeness prefixes, length/style constraints) are split the same way.

``train_prompts()`` (1200 by default) and ``heldout_prompts()`` (48) return lists of user messages; the
order is a fixed shuffle, so any prefix of the train list is itself diverse (the data stage stops early).

    python -m bench.prompts [--show 20] [--split heldout]   # print a sample and the self-check
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

SEED = 20240611
HELDOUT_FRACTION = 0.2

# ----------------------------------------------------------------------------------------------------------------
# Content pools (each split once into train / held-out parts)
# ----------------------------------------------------------------------------------------------------------------

TOPICS = [
    # science
    "photosynthesis", "black holes", "plate tectonics", "the water cycle", "DNA replication", "vaccines",
    "the immune system", "volcanoes", "earthquakes", "climate change", "the greenhouse effect", "gravity",
    "magnetism", "static electricity", "the speed of light", "nuclear fusion", "solar panels", "wind turbines",
    "rainbows", "tides", "the phases of the moon", "evolution by natural selection", "antibiotics",
    "the human heart", "sleep", "dreams", "memory", "the nervous system", "bacteria", "viruses",
    "coral reefs", "rainforests", "deserts", "glaciers", "hurricanes", "tornadoes", "lightning", "fossils",
    "dinosaurs", "honeybees", "ants", "octopuses", "whales", "migration of birds", "photosynthetic algae",
    "the periodic table", "chemical reactions", "acids and bases", "atoms", "electric circuits", "batteries",
    "the solar system", "Mars", "the International Space Station", "telescopes", "comets", "the Big Bang",
    # technology
    "the internet", "spam filters", "search engines", "cloud computing", "machine learning", "neural networks",
    "blockchain", "encryption", "passwords", "computer viruses", "open-source software", "smartphones",
    "GPS", "3D printing", "electric cars", "self-driving cars", "robots", "video games", "virtual reality",
    "databases", "operating systems", "version control with Git", "web browsers", "Wi-Fi", "QR codes",
    "social media", "podcasts", "streaming services", "the printing press", "the telephone",
    # society, economics, history
    "inflation", "interest rates", "budgeting", "credit scores", "the stock market", "taxes", "supply and demand",
    "democracy", "elections", "the United Nations", "human rights", "recycling", "urban gardening",
    "public libraries", "volunteering", "remote work", "the four-day work week", "minimalism", "time management",
    "the Roman Empire", "ancient Egypt", "the Silk Road", "the Renaissance", "the Industrial Revolution",
    "the Moon landing", "the Olympic Games", "the history of money", "castles", "pirates", "Vikings",
    # everyday life, health, hobbies
    "healthy breakfast", "drinking enough water", "regular exercise", "meditation", "yoga", "running",
    "swimming", "cycling", "chess", "gardening", "baking bread", "making coffee", "tea", "chocolate",
    "spices", "vegetarian cooking", "fermentation", "composting", "houseplants", "keeping a journal",
    "learning a new language", "reading habits", "public speaking", "job interviews", "friendship",
    "moving to a new city", "camping", "hiking", "photography", "painting with watercolors", "playing guitar",
    "jazz", "classical music", "movies", "theater", "poetry", "museums", "board games", "knitting",
    "pets", "dogs", "cats", "horses", "aquariums", "bicycles", "trains", "airplanes", "ships", "bridges",
    "skyscrapers", "lighthouses", "islands", "mountains", "rivers", "oceans", "the Arctic", "autumn", "winter",
    "spring", "summer holidays", "birthdays", "weddings", "festivals", "markets", "coffee shops", "bakeries",
]

CHARACTERS = [
    "a curious fox", "a retired astronaut", "a shy dragon", "a robot who wants to paint", "a lonely lighthouse keeper",
    "a young inventor", "a talking cat", "a grandmother who loves skateboarding", "a lost penguin", "a brave mouse",
    "a detective who is afraid of the dark", "a tree that can walk", "a tired mail carrier", "a pirate captain",
    "a baker with a secret", "a girl who collects clouds", "an old clockmaker", "a snail in a hurry",
    "a wizard who forgot his spells", "a teenage chess champion", "a friendly ghost", "a farmer and his goat",
    "two rival chefs", "a knight who hates horses", "a little turtle", "a street musician", "a nervous pilot",
    "a librarian who can read minds", "a squirrel who saves the forest", "a time traveler", "a polar bear cub",
    "a shopkeeper in a tiny village", "an owl who cannot sleep at night", "a scientist and her dog",
    "a boy who befriends a whale", "a knight's apprentice", "a family of raccoons", "a runaway kite",
]

SITUATIONS = [
    "finds a mysterious map", "gets lost in a big city", "has to win a race", "discovers a hidden door",
    "wakes up with a new power", "must save a friend", "tries to bake a perfect cake", "meets a stranger on a train",
    "loses something precious", "learns to fly", "enters a talent show", "goes on a journey to the sea",
    "has one day to fix a mistake", "finds a letter from the past", "is stuck in a storm", "plants a magic seed",
    "tries to make a new friend", "opens a small shop", "gets a strange package", "climbs the tallest mountain",
    "builds a machine out of junk", "hears a song nobody else can hear", "moves to a new school",
    "gets trapped in a museum overnight", "has to keep a big secret", "finds a robot in the attic",
]

PLACES = [
    "a quiet mountain village", "a busy train station", "an underwater city", "a space station", "a desert oasis",
    "a haunted castle", "a floating market", "a snowy forest", "a lighthouse on a cliff", "a crowded library",
    "a tiny island", "a rooftop garden", "an abandoned amusement park", "a jungle temple", "a small bakery",
    "a moon colony", "a night market", "a sunflower field", "a bustling harbor", "a school on a cloud",
    "an old bookshop", "a farm during harvest", "a city in the year 3000", "a cave full of crystals",
]

ACTIVITIES = [
    "saving money", "studying for exams", "sleeping better", "staying focused while working from home",
    "starting a vegetable garden", "learning to cook", "running a first 5k", "writing a resume", "packing for a trip",
    "making new friends as an adult", "reducing screen time", "organizing a small kitchen", "taking better photos",
    "learning to code", "staying motivated", "preparing for a job interview", "keeping plants alive",
    "reducing food waste", "traveling on a budget", "learning to draw", "giving a presentation",
    "training a puppy", "cleaning a messy room", "staying safe online", "eating more vegetables",
    "writing a novel", "planning a birthday party", "improving handwriting", "learning to swim",
    "waking up early", "dealing with stress", "starting a podcast", "memorizing vocabulary", "cooking rice",
]

RECIPIENTS_PURPOSES = [
    ("my manager", "asking for a day off next Friday"), ("a professor", "asking for an extension on an assignment"),
    ("a landlord", "reporting a broken heater"), ("a customer", "apologizing for a late delivery"),
    ("my team", "announcing a new project kickoff meeting"), ("a friend", "inviting them to a birthday dinner"),
    ("a hotel", "requesting an early check-in"), ("a colleague", "thanking them for their help"),
    ("a company", "applying for a summer internship"), ("a neighbor", "asking them to keep the noise down"),
    ("the school", "explaining why my child was absent"), ("a client", "following up on an unpaid invoice"),
    ("a recruiter", "declining a job offer politely"), ("customer support", "asking for a refund"),
    ("my coworkers", "organizing a charity bake sale"), ("a conference organizer", "proposing a talk"),
    ("a local newspaper", "suggesting a story about a community garden"), ("my gym", "cancelling a membership"),
    ("a supplier", "asking for a price quote"), ("my parents", "telling them about my new job"),
    ("a bookstore", "asking whether a book is in stock"), ("a new employee", "welcoming them to the team"),
    ("a restaurant", "booking a table for twelve people"), ("a mentor", "asking for career advice"),
]

DIALOG_PAIRS = [
    ("a teacher", "a student"), ("a doctor", "a patient"), ("a customer", "a waiter"), ("two astronauts", None),
    ("a detective", "a witness"), ("a cat", "a dog"), ("a job interviewer", "a candidate"), ("a tourist", "a local"),
    ("a grandparent", "a grandchild"), ("two robots", None), ("a shopkeeper", "a child"), ("a coach", "an athlete"),
    ("a scientist", "a journalist"), ("a librarian", "a reader"), ("two old friends", None), ("a pilot", "a passenger"),
    ("a chef", "a food critic"), ("a landlord", "a tenant"), ("a farmer", "a city kid"), ("an alien", "a human"),
]

PARAGRAPHS = [
    "Honeybees communicate the location of food through a movement called the waggle dance. A forager returns to the "
    "hive and walks in a figure-eight pattern, waggling its body during the straight part. The angle of the straight "
    "run relative to vertical indicates the direction of the food relative to the sun, and the duration of the waggle "
    "tells other bees how far away it is.",
    "The city council voted on Tuesday to convert two downtown parking lots into a public park. Supporters argued "
    "that the area lacks green space and that the park would attract visitors to local shops. Opponents worried "
    "about the loss of parking and the cost of maintenance. Construction is expected to begin next spring.",
    "Sourdough bread is leavened by a starter, a mixture of flour and water colonized by wild yeast and lactic acid "
    "bacteria. The bacteria produce acids that give the bread its tangy flavor, while the yeast produces carbon "
    "dioxide that makes the dough rise. Because the process is slow, sourdough often takes a full day to make.",
    "During the nineteenth century, railways transformed how people lived and worked. Journeys that once took days "
    "could be completed in hours, and goods could be moved cheaply across long distances. Towns grew around "
    "stations, and standardized time zones were introduced so that train schedules could be coordinated.",
    "A recent survey of remote workers found that most of them value flexible hours more than a higher salary. "
    "However, many also reported feeling isolated and said they missed casual conversations with colleagues. "
    "Companies are experimenting with occasional in-person meetups to keep teams connected.",
    "Octopuses are remarkably intelligent invertebrates. They can solve puzzles, open jars, and escape from tanks. "
    "Each of their eight arms contains a large number of neurons, allowing the arms to act partly on their own. "
    "They can also change the color and texture of their skin in a fraction of a second to hide from predators.",
    "The library will extend its opening hours during the exam period. From the first of May until the end of June, "
    "the reading rooms will stay open until midnight on weekdays. Students must show a valid ID after eight in the "
    "evening, and food is still not allowed in the quiet areas.",
    "Compound interest means that you earn interest not only on the money you saved but also on the interest that "
    "money has already earned. Over long periods, this effect can make a small, regular investment grow into a large "
    "sum. Starting early matters more than the size of each contribution.",
    "The marathon traces its origin to the legend of a Greek messenger who ran from the town of Marathon to Athens to "
    "announce a victory. The modern race was introduced at the first modern Olympic Games in 1896. Its distance was "
    "later fixed at 42.195 kilometers, the length used at the 1908 London Olympics.",
    "Our new coffee maker brews a full pot in under five minutes and keeps it warm for two hours. It has a removable "
    "water tank, a reusable filter, and a timer so you can wake up to fresh coffee. Customers have praised its quiet "
    "operation, though some wish the carafe were larger.",
    "Glaciers form where more snow falls in winter than melts in summer. Over many years, the snow compresses into "
    "dense ice that begins to flow slowly downhill under its own weight. As they move, glaciers carve valleys, "
    "carry rocks over great distances and leave behind lakes when they retreat.",
    "The first vaccines were developed after doctors noticed that milkmaids who caught cowpox rarely caught smallpox. "
    "Exposing people to a mild, related disease trained their bodies to resist the deadly one. Today vaccines use "
    "weakened viruses, pieces of proteins or genetic instructions to achieve the same effect safely.",
    "Many people struggle to keep New Year's resolutions because their goals are too vague. Psychologists suggest "
    "setting specific, measurable targets and tracking progress each week. Small habits, repeated daily, tend to "
    "last longer than dramatic changes that rely on willpower alone.",
    "The team released version 2.0 of the app last night. The update adds a dark mode, faster search and support for "
    "offline editing. Several users reported that the login screen crashes on older phones, and a fix is planned "
    "for later this week.",
    "Lighthouses were built to warn ships of dangerous coasts and to guide them into harbors. Each lighthouse has "
    "its own pattern of flashes so that sailors can identify it at night. Today most lighthouses are automated, and "
    "satellite navigation has reduced their importance, but many are preserved as museums.",
    "Tea was first consumed in China as a medicinal drink before becoming a daily beverage. It spread along trade "
    "routes to Japan, India and eventually Europe, where it became fashionable in the seventeenth century. Today it "
    "is the second most consumed drink in the world after water.",
    "Sleep plays a key role in memory. While we sleep, the brain replays experiences from the day and strengthens "
    "the connections that store them. Students who sleep well after studying tend to remember more than those who "
    "stay up all night, even if they spent more time reading.",
    "The museum's new exhibition brings together more than two hundred objects from ancient Egypt, including "
    "jewelry, tools and a painted coffin. Visitors can also try a virtual reality tour of a pharaoh's tomb. Tickets "
    "are free for children under twelve, and the exhibition runs until September.",
    "Electric scooters have become common in many cities. They offer a cheap and quick way to travel short "
    "distances, but they have also caused complaints about cluttered sidewalks and accidents. Some cities now "
    "require riders to park in marked zones and have lowered speed limits in busy areas.",
    "The Great Wall of China is not a single wall but a series of fortifications built over many centuries. Different "
    "dynasties added sections to protect against invasions from the north. The best-known parts were built during "
    "the Ming dynasty, using bricks and stone rather than the packed earth of earlier walls.",
    "Composting turns kitchen scraps and garden waste into rich soil. Microorganisms break down the material, "
    "and the pile needs a balance of green waste, like vegetable peels, and brown waste, like dry leaves. Turning "
    "the pile every few weeks adds oxygen and speeds up the process.",
    "Yesterday's storm knocked out power to about ten thousand homes in the northern districts. Crews worked "
    "through the night to clear fallen trees from roads. The utility company expects to restore electricity to "
    "all customers by Thursday and advises residents to avoid downed lines.",
    "Chess originated in India around the sixth century and spread to Persia and then to Europe. The rules changed "
    "over time; the queen, once a weak piece, became the most powerful one in the fifteenth century. Today millions "
    "of people play online, and computers can defeat the best human players.",
    "Bamboo is one of the fastest-growing plants in the world; some species can grow almost a meter in a single day. "
    "It is strong, light and flexible, which makes it useful for building scaffolding, furniture and even bicycles. "
    "Because it regrows quickly after cutting, it is considered a sustainable material.",
]

PYTHON_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the factorial of n", "counts the vowels in a string",
    "returns the nth Fibonacci number", "checks whether a string is a palindrome", "finds the largest number in a list",
    "removes duplicates from a list while keeping the order", "converts Celsius to Fahrenheit",
    "returns the sum of the digits of an integer", "merges two sorted lists into one sorted list",
    "counts how often each word appears in a sentence", "flattens a list of lists", "computes the average of a list",
    "checks whether two strings are anagrams", "returns the second largest element of a list",
    "capitalizes the first letter of every word", "computes the greatest common divisor of two numbers",
    "checks whether a year is a leap year", "returns all even numbers from a list", "transposes a matrix",
    "converts a binary string to an integer", "finds the longest word in a sentence", "rotates a list by k positions",
    "splits a list into chunks of size n", "returns the intersection of two lists", "counts the lines in a text file",
    "validates a simple email address", "converts a dictionary into a list of key-value tuples",
    "computes the running total of a list", "checks whether a list is sorted", "returns the median of a list",
    "removes all whitespace from a string", "implements binary search", "computes the power set of a list",
    "converts a number to Roman numerals", "implements bubble sort", "finds the most common element in a list",
    "returns the list of prime factors of n", "checks whether brackets in a string are balanced",
    "reads a CSV file and returns the rows as dictionaries", "generates a random password of a given length",
    "returns the number of days between two dates", "groups words by their first letter", "implements a stack class",
]

CODE_SNIPPETS = [
    "def f(xs):\n    return [x * x for x in xs if x % 2 == 0]",
    "def g(s):\n    return s == s[::-1]",
    "total = 0\nfor i in range(1, 11):\n    total += i\nprint(total)",
    "def count(items):\n    d = {}\n    for it in items:\n        d[it] = d.get(it, 0) + 1\n    return d",
    "import random\nnumbers = random.sample(range(1, 50), 6)\nprint(sorted(numbers))",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "with open('notes.txt') as f:\n    lines = [line.strip() for line in f]\nprint(len(lines))",
    "class Counter:\n    def __init__(self):\n        self.n = 0\n    def tick(self):\n        self.n += 1\n        return self.n",
    "words = sentence.split()\nlongest = max(words, key=len)\nprint(longest)",
    "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))",
    "squares = {n: n ** 2 for n in range(5)}\nprint(squares)",
    "def merge(a, b):\n    return sorted(a + b)",
    "name = input('Name: ')\nprint(f'Hello, {name}!')",
    "def is_even(n):\n    return n % 2 == 0\n\nprint(list(filter(is_even, range(10))))",
    "from collections import Counter\nprint(Counter('mississippi').most_common(2))",
    "def safe_div(a, b):\n    try:\n        return a / b\n    except ZeroDivisionError:\n        return None",
    "matrix = [[1, 2], [3, 4]]\nflat = [x for row in matrix for x in row]\nprint(flat)",
    "def greet(name='world'):\n    return 'Hello ' + name",
    "import time\nstart = time.time()\nsum(range(10**6))\nprint(time.time() - start)",
    "def unique(xs):\n    seen = set()\n    return [x for x in xs if not (x in seen or seen.add(x))]",
]

BUGGY_CODE = [
    "def average(nums):\n    return sum(nums) / len(nums) + 1",
    "def is_prime(n):\n    for i in range(2, n):\n        if n % i == 0:\n            return True\n    return False",
    "def reverse(s):\n    return s[::1]",
    "def max_of(xs):\n    m = 0\n    for x in xs:\n        if x > m:\n            m = x\n    return m",
    "def factorial(n):\n    if n == 0:\n        return 0\n    return n * factorial(n - 1)",
    "def count_a(s):\n    count = 0\n    for ch in s:\n        if ch == 'a':\n            count =+ 1\n    return count",
    "def last(xs):\n    return xs[len(xs)]",
    "def add_item(item, items=[]):\n    items.append(item)\n    return items",
    "def celsius_to_f(c):\n    return c * 5 / 9 + 32",
    "def is_even(n):\n    if n % 2 = 0:\n        return True\n    return False",
    "for i in range(10)\n    print(i)",
    "def greet(name):\n    print('Hello ' + name)\n\nmessage = greet('Ana')\nprint(message.upper())",
    "def sum_list(xs):\n    total = 0\n    for i in range(1, len(xs)):\n        total += xs[i]\n    return total",
    "def contains(xs, target):\n    for x in xs:\n        if x == target:\n            return True\n        else:\n            return False",
    "numbers = [1, 2, 3]\nfor n in numbers:\n    numbers.remove(n)\nprint(numbers)",
    "def divide(a, b):\n    return a // b  # should return the exact quotient",
]

QUESTIONS = [
    "What is the capital of Australia?", "Who wrote Romeo and Juliet?", "How many planets are in the solar system?",
    "What is the boiling point of water at sea level?", "Who painted the Mona Lisa?", "What is the largest ocean on Earth?",
    "How many continents are there?", "What gas do plants absorb from the air?", "Who was the first person on the Moon?",
    "What is the chemical symbol for gold?", "How many bones are in the adult human body?",
    "What is the tallest mountain in the world?", "Which planet is known as the Red Planet?",
    "What language is spoken in Brazil?", "Who invented the light bulb?", "What is the longest river in Africa?",
    "How many days are in a leap year?", "What is the freezing point of water in Fahrenheit?",
    "What is the hardest natural substance?", "Which animal is the largest mammal?", "What is the square root of 144?",
    "Who developed the theory of relativity?", "What is the currency of Japan?", "What year did World War II end?",
    "What is the smallest prime number?", "Which organ pumps blood through the body?", "What is the capital of Canada?",
    "How many sides does a hexagon have?", "What do bees make?", "Which country has the largest population?",
    "What is H2O commonly called?", "Who wrote Pride and Prejudice?", "What is the main ingredient of guacamole?",
    "How long does it take the Earth to orbit the Sun?", "What is the capital of Italy?", "What is the speed of sound?",
    "Which instrument has 88 keys?", "What is the largest desert in the world?", "Who discovered penicillin?",
    "What is the capital of Kenya?", "How many strings does a standard guitar have?", "What is a baby kangaroo called?",
    "What does a thermometer measure?", "Which element has the atomic number 1?", "What is the capital of Argentina?",
    "How many minutes are in a day?", "Who was Cleopatra?", "What is the largest planet in our solar system?",
    "Why is the sky blue?", "Why do cats purr?", "Why do leaves change color in autumn?", "Why is the ocean salty?",
    "How do airplanes stay in the air?", "How do fish breathe underwater?", "Why do we yawn?",
    "How are rainbows formed?", "Why does ice float on water?", "How do vaccines protect us?",
]

TERMS = [
    "algorithm", "photosynthesis", "metaphor", "inflation", "ecosystem", "democracy", "variable", "gravity",
    "empathy", "renewable energy", "biodiversity", "mortgage", "hypothesis", "irony", "recursion", "latitude",
    "entrepreneur", "placebo", "allergy", "bandwidth", "haiku", "protein", "carbon footprint", "opportunity cost",
    "cryptocurrency", "habitat", "sonnet", "friction", "molecule", "nostalgia", "procrastination", "API",
    "firewall", "satire", "dividend", "erosion", "mitochondria", "onomatopoeia", "compiler", "resilience",
    "vaccine", "archipelago", "symbiosis", "paradox", "budget deficit", "pixel", "antibody", "fermentation",
]

TRANSLATION_SENTENCES = [
    "Good morning, how are you?", "Where is the train station?", "I would like a cup of coffee, please.",
    "The weather is beautiful today.", "My name is Anna and I am a teacher.", "How much does this cost?",
    "Thank you very much for your help.", "I love reading books in the evening.", "The cat is sleeping on the sofa.",
    "Can you help me find my keys?", "We are going to the beach tomorrow.", "I don't understand.",
    "What time does the store open?", "My brother plays the guitar.", "It is raining outside.",
    "I am hungry; let's eat.", "This is my favorite song.", "The library is closed on Sundays.",
    "Please speak more slowly.", "Happy birthday!", "I have two sisters and one brother.",
    "The museum is next to the park.", "Do you have a map of the city?", "See you tomorrow.",
]

LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch", "Swedish", "Polish", "Turkish",
             "Indonesian", "Romanian", "Danish"]

STYLE_SENTENCES = [
    "The meeting has been moved to Thursday.", "I can't come to the party because I'm sick.",
    "Our product is cheap and it works well.", "The train was late again this morning.",
    "Please send me the report by Friday.", "The food at the restaurant was very good.",
    "We need more volunteers for the event.", "The new phone has a bigger screen and a better camera.",
    "I forgot to do my homework.", "The park is a nice place to relax.", "Prices went up a lot this year.",
    "The dog ran away but came back at night.", "The concert was loud and crowded but fun.",
    "You should drink more water every day.", "The project is behind schedule.",
    "Our team won the game in the last minute.", "The store will close early tomorrow.",
    "This software is hard to use.", "I think we should take a break.", "The hotel room was small but clean.",
]

STYLES = ["formal", "casual", "poetic", "humorous", "Shakespearean", "enthusiastic", "polite", "concise",
          "dramatic", "child-friendly", "professional", "pirate-speak", "news headline", "sarcastic"]

COMPARE_PAIRS = [
    ("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("Python", "JavaScript"), ("renting", "buying a home"),
    ("e-books", "paper books"), ("summer", "winter"), ("running", "swimming"), ("laptops", "desktop computers"),
    ("the Sun", "the Moon"), ("city life", "country life"), ("lists", "tuples in Python"), ("weather", "climate"),
    ("viruses", "bacteria"), ("saving", "investing"), ("frogs", "toads"), ("crocodiles", "alligators"),
    ("a violin", "a cello"), ("baking", "frying"), ("solar energy", "wind energy"), ("email", "instant messaging"),
    ("working from home", "working in an office"), ("mountains", "beaches for a vacation"), ("RAM", "storage"),
    ("speed", "velocity"), ("butter", "margarine"), ("hurricanes", "typhoons"), ("a lake", "a pond"),
    ("stocks", "bonds"), ("democracy", "monarchy"), ("TCP", "UDP"), ("weights", "cardio"),
]

LIFE_SITUATIONS = [
    "have too much homework and not enough time", "just moved to a new city and feel lonely",
    "keep procrastinating on an important project", "want to ask for a raise", "am nervous about a job interview",
    "had an argument with my best friend", "want to start exercising but have no motivation",
    "spend too much money on takeout", "can't fall asleep at night", "want to learn to play an instrument",
    "have a roommate who never cleans", "am starting my first job next week", "want to eat healthier",
    "feel stuck in my career", "forgot my friend's birthday", "am afraid of speaking in public",
    "want to travel but have a small budget", "have a noisy neighbor", "want to read more books",
    "am overwhelmed by emails", "want to get better at math", "am planning my first vegetable garden",
]

MATH_NAMES = ["Maria", "Tom", "Aisha", "Lucas", "Mei", "Omar", "Sofia", "Ivan", "Priya", "Jack", "Lena", "Carlos",
              "Yuki", "Fatima", "Noah", "Elena", "Kwame", "Hannah", "Diego", "Zara"]
MATH_ITEMS = ["apples", "stickers", "marbles", "books", "pencils", "cookies", "stamps", "oranges", "cards",
              "balloons", "shells", "coins", "cupcakes", "toy cars", "flowers", "eggs"]

BRAINSTORM = [
    "a coffee shop", "a school science fair project", "a rainy weekend", "a team-building activity", "a cat",
    "a small bakery", "a fantasy kingdom", "a podcast about history", "a mobile app for students",
    "a community garden", "a birthday party for a ten-year-old", "a board game", "a travel blog",
    "a charity fundraiser", "a bookshop", "a robot mascot", "a healthy lunch", "a short film",
]

HOWTO = [
    "boil an egg", "change a flat bicycle tire", "make a paper airplane", "tie a tie", "plant a tree",
    "make pancakes", "back up my computer", "write a thank-you note", "set up a fish tank", "make a budget",
    "clean a laptop keyboard", "brew tea properly", "wrap a present", "sharpen a knife safely",
    "make a simple website", "fold a fitted sheet", "start a fire while camping", "make lemonade",
    "remove a coffee stain", "teach a dog to sit", "make a smoothie", "create a strong password",
]

REVIEWS = [
    "The battery lasts all day and the screen is gorgeous. Best purchase this year.",
    "It broke after two days and customer service never answered my emails.",
    "The food was okay, nothing special, but the staff were friendly.",
    "I waited an hour for a cold pizza. Never again.",
    "Comfortable shoes, true to size, and they look great with jeans.",
    "The movie started slowly, but the ending made up for it.",
    "Terrible sound quality, and the headphones hurt my ears.",
    "A cozy hotel with a lovely breakfast and a view of the lake.",
    "The instructions were confusing, but once assembled the desk is sturdy.",
    "Absolutely loved this book; I couldn't put it down.",
    "The app crashes every time I try to upload a photo.",
    "Decent value for the price, though the color faded after a few washes.",
]

GRAMMAR = [
    "me and him goes to the store yesterday", "she don't like apples", "their going to the park tomorow",
    "i has three cat and one dogs", "the childs was playing in the garden", "we was late becuase of traffic",
    "he runned very fast in the race", "can you borrow me a pen", "there is many peoples here",
    "I seen that movie last week", "its a beautiful day, isnt it", "she have been working here since two years",
    "the informations are wrong", "less people came then we expected", "him and me is best friends",
]

JOKE_TOPICS = ["computers", "cats", "librarians", "coffee", "the weather", "vegetables", "dinosaurs", "teachers",
               "the ocean", "musicians", "socks", "elevators", "bananas", "astronauts", "homework", "penguins"]

AUDIENCES = ["a five-year-old", "a high school student", "a grandparent", "a software engineer", "a tourist",
             "a busy manager", "a complete beginner", "a curious teenager"]

PRODUCTS = ["a reusable water bottle", "noise-cancelling headphones", "a bamboo toothbrush", "a smart alarm clock",
            "a folding bicycle", "a solar phone charger", "a handmade ceramic mug", "a weekly meal-kit service",
            "a waterproof backpack", "an indoor herb garden kit"]

EVENTS = ["the opening of a new library", "a free community concert", "a charity fun run", "a new bakery in town",
          "a school art exhibition", "a coding workshop for beginners", "a book swap in the park",
          "a farmers market starting next week"]


# ----------------------------------------------------------------------------------------------------------------
# Splitting
# ----------------------------------------------------------------------------------------------------------------

def _split(name: str, items: list, frac: float = HELDOUT_FRACTION) -> tuple[list, list]:
    """Deterministic split of a pool into (train, heldout) parts; at least one item on each side."""
    order = list(items)
    random.Random(f"{SEED}:{name}").shuffle(order)
    n_held = max(1, round(len(order) * frac))
    return order[n_held:], order[:n_held]


POOLS = {
    "topic": TOPICS, "character": CHARACTERS, "situation": SITUATIONS, "place": PLACES, "activity": ACTIVITIES,
    "email": RECIPIENTS_PURPOSES, "pair": DIALOG_PAIRS, "paragraph": PARAGRAPHS, "pytask": PYTHON_TASKS,
    "snippet": CODE_SNIPPETS, "buggy": BUGGY_CODE, "question": QUESTIONS, "term": TERMS,
    "sentence": TRANSLATION_SENTENCES, "language": LANGUAGES, "style_sentence": STYLE_SENTENCES, "style": STYLES,
    "compare": COMPARE_PAIRS, "life": LIFE_SITUATIONS, "name": MATH_NAMES, "item": MATH_ITEMS,
    "brainstorm": BRAINSTORM, "howto": HOWTO, "review": REVIEWS, "grammar": GRAMMAR, "joke": JOKE_TOPICS,
    "audience": AUDIENCES, "product": PRODUCTS, "event": EVENTS,
}
#: pools whose items are common words (names, languages, ...): split, but not matched against topics
_PLAIN_POOLS = {"name", "item", "language", "style", "audience", "snippet", "buggy"}


def _text(item) -> str:
    return " ".join(x for x in (item if isinstance(item, tuple) else (item,)) if x)


def topic_pattern(topic: str) -> re.Pattern:
    """A topic's word-boundary pattern, loose on plural/-ing endings (``the whales`` ~ ``whale``)."""
    core = re.sub(r"^(the|a|an) ", "", topic.lower())
    stem = core[:-1] if len(core) > 4 and core.endswith("s") else core
    return re.compile(r"\b" + re.escape(stem) + (r"\w*" if len(stem) > 4 else r"s?\b"), re.IGNORECASE)


def _split_pools() -> dict[str, tuple[list, list]]:
    """Split the topic pool, then every other pool so that an item naming a topic follows that topic's side.

    A held-out prompt then never mentions a training topic through another pool (a paragraph about glaciers,
    a question about vaccines) and vice versa; items naming topics of both sides are dropped.
    """
    topics_train, topics_held = _split("topic", TOPICS)
    pats_train = [topic_pattern(t) for t in topics_train]
    pats_held = [topic_pattern(t) for t in topics_held]
    out = {"topic": (topics_train, topics_held)}
    for name, items in POOLS.items():
        if name == "topic":
            continue
        if name in _PLAIN_POOLS:
            out[name] = _split(name, items)
            continue
        forced_train, forced_held, free = [], [], []
        for it in items:
            t = _text(it)
            in_train = any(pt.search(t) for pt in pats_train)
            in_held = any(pt.search(t) for pt in pats_held)
            if in_train and in_held:
                continue
            (forced_train if in_train else forced_held if in_held else free).append(it)
        n_held = max(1, round(len(items) * HELDOUT_FRACTION)) - len(forced_held)
        order = list(free)
        random.Random(f"{SEED}:{name}").shuffle(order)
        n_held = min(max(n_held, 0 if forced_held else 1), len(order) - 1)
        out[name] = (forced_train + order[n_held:], forced_held + order[:n_held])
    return out


_SPLIT_POOLS = _split_pools()


def pools(split: str) -> dict[str, list]:
    i = 0 if split == "train" else 1
    return {name: parts[i] for name, parts in _SPLIT_POOLS.items()}


# ----------------------------------------------------------------------------------------------------------------
# Task families: each a list of templates; a template is a function (rng, pool) -> prompt
# ----------------------------------------------------------------------------------------------------------------

Template = Callable[[random.Random, dict], str]


def _n(rng: random.Random, lo: int = 3, hi: int = 7) -> int:
    return rng.randint(lo, hi)


def _pick(rng: random.Random, p: dict, key: str):
    return rng.choice(p[key])


def _math_numbers(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(3, 40), rng.randint(2, 25), rng.randint(2, 9)


FAMILIES: dict[str, list[Template]] = {
    "explain": [
        lambda r, p: f"Explain {_pick(r, p, 'topic')} in simple terms.",
        lambda r, p: f"Give me an introduction to {_pick(r, p, 'topic')}.",
        lambda r, p: f"Can you give me a short overview of {_pick(r, p, 'topic')}?",
        lambda r, p: f"What should a beginner know about {_pick(r, p, 'topic')}?",
        lambda r, p: f"Why is {_pick(r, p, 'topic')} important?",
        lambda r, p: f"Describe {_pick(r, p, 'topic')} to {_pick(r, p, 'audience')}.",
        lambda r, p: f"Tell me something interesting about {_pick(r, p, 'topic')}.",
        lambda r, p: f"Write a short paragraph about {_pick(r, p, 'topic')}.",
        lambda r, p: f"I never understood {_pick(r, p, 'topic')}. Can you explain it?",
        lambda r, p: f"Give a one-sentence explanation of {_pick(r, p, 'topic')}.",
    ],
    "list": [
        lambda r, p: f"List {_n(r)} facts about {_pick(r, p, 'topic')}.",
        lambda r, p: f"Give me {_n(r)} tips for {_pick(r, p, 'activity')}.",
        lambda r, p: f"What are {_n(r, 3, 5)} common mistakes people make when {_pick(r, p, 'activity')}?",
        lambda r, p: f"Name {_n(r, 2, 4)} advantages and {_n(r, 2, 4)} disadvantages of {_pick(r, p, 'topic')}.",
        lambda r, p: f"Make a checklist for {_pick(r, p, 'activity')}.",
        lambda r, p: f"What are the main steps of {_pick(r, p, 'activity')}?",
        lambda r, p: f"List {_n(r)} words related to {_pick(r, p, 'topic')}.",
        lambda r, p: f"Give me a numbered list of {_n(r)} questions a student might ask about {_pick(r, p, 'topic')}.",
    ],
    "story": [
        lambda r, p: f"Write a short story about {_pick(r, p, 'character')} who {_pick(r, p, 'situation')}.",
        lambda r, p: f"Tell me a bedtime story featuring {_pick(r, p, 'character')}.",
        lambda r, p: f"Write a {_n(r, 3, 8)}-sentence story set in {_pick(r, p, 'place')}.",
        lambda r, p: f"Write the opening paragraph of a mystery novel set in {_pick(r, p, 'place')}.",
        lambda r, p: f"Write a fable with a moral about {_pick(r, p, 'character')}.",
        lambda r, p: f"Continue this story: \"{_pick(r, p, 'character').capitalize()} {_pick(r, p, 'situation')}. "
                     f"At first, nothing seemed unusual...\"",
        lambda r, p: f"Write a funny short story in which {_pick(r, p, 'character')} visits {_pick(r, p, 'place')}.",
        lambda r, p: f"Describe a day in the life of {_pick(r, p, 'character')}.",
    ],
    "poem": [
        lambda r, p: f"Write a poem about {_pick(r, p, 'topic')}.",
        lambda r, p: f"Write a limerick about {_pick(r, p, 'character')}.",
        lambda r, p: f"Compose a short rhyming poem about {_pick(r, p, 'place')}.",
        lambda r, p: f"Write a four-line poem about {_pick(r, p, 'topic')} for a greeting card.",
        lambda r, p: f"Write song lyrics about {_pick(r, p, 'topic')}.",
        lambda r, p: f"Write a free-verse poem from the point of view of {_pick(r, p, 'character')}.",
    ],
    "email": [
        lambda r, p: "Write an email to {} {}.".format(*_pick(r, p, "email")),
        lambda r, p: "Draft a short, polite message to {} {}.".format(*_pick(r, p, "email")),
        lambda r, p: "Help me write a letter to {} {}.".format(*_pick(r, p, "email")),
        lambda r, p: "Compose a professional email to {}, {}. Keep it under 120 words.".format(*_pick(r, p, "email")),
    ],
    "dialog": [
        lambda r, p: _dialog(r, p, "Write a dialogue between {ab} about {t}."),
        lambda r, p: _dialog(r, p, "Write a short conversation between {ab} discussing {t}."),
        lambda r, p: _dialog(r, p, "Create a funny exchange between {ab} who disagree about {t}."),
        lambda r, p: _dialog(r, p, "Write a script for a short scene with {ab}, where the topic is {t}."),
    ],
    "summarize": [
        lambda r, p: f"Summarize the following paragraph in one sentence:\n\n{_pick(r, p, 'paragraph')}",
        lambda r, p: f"{_pick(r, p, 'paragraph')}\n\nSummarize this text.",
        lambda r, p: f"What is the main idea of this text?\n\n{_pick(r, p, 'paragraph')}",
        lambda r, p: f"Give me three bullet points that summarize the following:\n{_pick(r, p, 'paragraph')}",
        lambda r, p: f"Read this and write a headline for it:\n\n{_pick(r, p, 'paragraph')}",
        lambda r, p: f"Extract the key facts from this paragraph:\n\"{_pick(r, p, 'paragraph')}\"",
    ],
    "question": [
        lambda r, p: _pick(r, p, "question"),
        lambda r, p: f"Quick question: {_pick(r, p, 'question')}",
        lambda r, p: f"{_pick(r, p, 'question')} Please explain your answer.",
        lambda r, p: f"Answer briefly: {_pick(r, p, 'question')}",
    ],
    "python_write": [
        lambda r, p: f"Write a Python function that {_pick(r, p, 'pytask')}.",
        lambda r, p: f"How do I write a Python program that {_pick(r, p, 'pytask')}?",
        lambda r, p: f"Implement a function in Python which {_pick(r, p, 'pytask')}, and include an example call.",
        lambda r, p: f"Show me Python code that {_pick(r, p, 'pytask')}. Add comments.",
        lambda r, p: f"Write a Python function that {_pick(r, p, 'pytask')} and explain how it works.",
    ],
    "python_explain": [
        lambda r, p: f"Explain what this Python code does:\n\n```python\n{_pick(r, p, 'snippet')}\n```",
        lambda r, p: f"```python\n{_pick(r, p, 'snippet')}\n```\nWhat will this code print or return?",
        lambda r, p: f"Add comments to this code:\n```python\n{_pick(r, p, 'snippet')}\n```",
        lambda r, p: f"Can this Python code be improved?\n```python\n{_pick(r, p, 'snippet')}\n```",
    ],
    "python_fix": [
        lambda r, p: f"Fix the bug in this function:\n\n```python\n{_pick(r, p, 'buggy')}\n```",
        lambda r, p: f"This code doesn't work as expected. What's wrong?\n```python\n{_pick(r, p, 'buggy')}\n```",
        lambda r, p: f"Find and correct the error:\n{_pick(r, p, 'buggy')}",
    ],
    "math": [
        lambda r, p: _math(r, p, "{n} has {a} {it}. {m} gives {n} {b} more. How many {it} does {n} have now?"),
        lambda r, p: _math(r, p, "{n} buys {c} bags with {a} {it} in each bag. How many {it} does {n} have in total?"),
        lambda r, p: _math(r, p, "A shop sells {it} for ${c} each. {n} buys {b} of them. How much does {n} pay?"),
        lambda r, p: _math(r, p, "{n} had {s} {it} and gave {b} to {m}. How many are left?"),
        lambda r, p: _math(r, p, "{n} reads {b} pages a day. How many pages does {n} read in {c} weeks?"),
        lambda r, p: _math(r, p, "A train travels at {s} km per hour for {c} hours. How far does it go?"),
        lambda r, p: _math(r, p, "{n} shares {p} {it} equally among {c} friends. How many does each friend get?"),
        lambda r, p: _math(r, p, "What is {a} percent of {s}0?"),
        lambda r, p: _math(r, p, "Solve for x: {c}x + {a} = {q}."),
        lambda r, p: _math(r, p, "A rectangle is {a} cm long and {c} cm wide. What are its area and perimeter?"),
    ],
    "compare": [
        lambda r, p: "Compare {} and {}.".format(*_pick(r, p, "compare")),
        lambda r, p: "What is the difference between {} and {}?".format(*_pick(r, p, "compare")),
        lambda r, p: "Which is better, {} or {}? Give reasons for both sides.".format(*_pick(r, p, "compare")),
        lambda r, p: "Make a table comparing {} and {}.".format(*_pick(r, p, "compare")),
    ],
    "advice": [
        lambda r, p: f"I {_pick(r, p, 'life')}. What should I do?",
        lambda r, p: f"Give me advice: I {_pick(r, p, 'life')}.",
        lambda r, p: f"My friend says they {_pick(r, p, 'life')}. How can I help them?",
        lambda r, p: f"What would you recommend for someone who wants to get better at {_pick(r, p, 'activity')}?",
        lambda r, p: f"I {_pick(r, p, 'life')}. Can you suggest a plan for the next week?",
    ],
    "define": [
        lambda r, p: f"Define {_pick(r, p, 'term')}.",
        lambda r, p: f"What does the word \"{_pick(r, p, 'term')}\" mean?",
        lambda r, p: f"Explain the term {_pick(r, p, 'term')} and use it in a sentence.",
        lambda r, p: f"What is {_pick(r, p, 'term')}? Give an example.",
    ],
    "translate": [
        lambda r, p: f"Translate to {_pick(r, p, 'language')}: \"{_pick(r, p, 'sentence')}\"",
        lambda r, p: f"How do you say \"{_pick(r, p, 'sentence')}\" in {_pick(r, p, 'language')}?",
        lambda r, p: f"Translate the following sentence into {_pick(r, p, 'language')} and explain the grammar:"
                     f" {_pick(r, p, 'sentence')}",
    ],
    "rewrite": [
        lambda r, p: f"Rewrite this sentence in a {_pick(r, p, 'style')} style: \"{_pick(r, p, 'style_sentence')}\"",
        lambda r, p: f"Make this more {_pick(r, p, 'style')}: {_pick(r, p, 'style_sentence')}",
        lambda r, p: f"Paraphrase the following sentence in three different ways: {_pick(r, p, 'style_sentence')}",
        lambda r, p: f"Turn this sentence into a question: \"{_pick(r, p, 'style_sentence')}\"",
    ],
    "howto": [
        lambda r, p: f"How do I {_pick(r, p, 'howto')}?",
        lambda r, p: f"Give me step-by-step instructions to {_pick(r, p, 'howto')}.",
        lambda r, p: f"What is the easiest way to {_pick(r, p, 'howto')}?",
        lambda r, p: f"Explain how to {_pick(r, p, 'howto')} in five steps.",
    ],
    "brainstorm": [
        lambda r, p: f"Brainstorm {_n(r)} names for {_pick(r, p, 'brainstorm')}.",
        lambda r, p: f"Suggest {_n(r, 3, 6)} creative ideas for {_pick(r, p, 'brainstorm')}.",
        lambda r, p: f"Come up with a slogan for {_pick(r, p, 'brainstorm')}.",
        lambda r, p: f"What are some fun themes for {_pick(r, p, 'brainstorm')}?",
    ],
    "classify": [
        lambda r, p: f"Is the following review positive or negative?\n\"{_pick(r, p, 'review')}\"",
        lambda r, p: f"Classify the sentiment of this review and explain why: {_pick(r, p, 'review')}",
        lambda r, p: f"Write a polite reply from the company to this customer review: \"{_pick(r, p, 'review')}\"",
    ],
    "grammar": [
        lambda r, p: f"Correct the grammar: \"{_pick(r, p, 'grammar')}\"",
        lambda r, p: f"Fix the spelling and grammar mistakes in this sentence: {_pick(r, p, 'grammar')}",
        lambda r, p: f"What is wrong with this sentence? \"{_pick(r, p, 'grammar')}\"",
    ],
    "joke": [
        lambda r, p: f"Tell me a joke about {_pick(r, p, 'joke')}.",
        lambda r, p: f"Write a pun about {_pick(r, p, 'joke')}.",
        lambda r, p: f"Make up a riddle about {_pick(r, p, 'joke')} and give the answer.",
    ],
}

# Families that training never sees at all (new task types for the held-out split).
HELDOUT_FAMILIES: dict[str, list[Template]] = {
    "haiku": [lambda r, p: f"Write a haiku about {_pick(r, p, 'topic')}."],
    "product": [lambda r, p: f"Write a product description for {_pick(r, p, 'product')}."],
    "quiz": [lambda r, p: f"Create a three-question multiple-choice quiz about {_pick(r, p, 'topic')}."],
    "tweet": [lambda r, p: f"Write a tweet announcing {_pick(r, p, 'event')}."],
    "analogy": [lambda r, p: f"Explain {_pick(r, p, 'topic')} using an analogy from everyday life."],
    "pros_interview": [lambda r, p: f"Write five interview questions for an expert on {_pick(r, p, 'topic')}."],
}

PREFIXES = ["", "", "", "", "Can you help? ", "Hey! ", "Quick question: ", "I'm curious. ", "Could you help me? ",
            "Hi, ", "For a school project: ", "I need some help. ", "Hello! ", "Just wondering: "]
SUFFIXES = ["", "", "", "", "", " Keep it short.", " Answer in about {w} words.", " Use bullet points.",
            " Explain it like I'm ten.", " Be detailed.", " Use a friendly tone.", " Please be concise.",
            " Include an example.", " Write it for a newsletter.", " Start with a one-line summary.",
            " Avoid technical jargon.", " Make it engaging.", " No more than {s} sentences."]
# decorations apply to these families only (code, paragraphs and translations stay clean)
DECORATED = {"explain", "list", "story", "poem", "advice", "define", "compare", "howto", "brainstorm", "question",
             "haiku", "analogy", "quiz", "pros_interview"}

_PREFIX_TRAIN, _PREFIX_HELD = _split("prefix", PREFIXES[4:], 0.25)
_SUFFIX_TRAIN, _SUFFIX_HELD = _split("suffix", SUFFIXES[5:], 0.25)


def _dialog(r: random.Random, p: dict, fmt: str) -> str:
    a, b = _pick(r, p, "pair")
    ab = a if b is None else f"{a} and {b}"
    return fmt.format(ab=ab, t=_pick(r, p, "topic"))


def _math(r: random.Random, p: dict, fmt: str) -> str:
    a, b, c = _math_numbers(r)
    n, m = r.sample(p["name"], 2) if len(p["name"]) > 1 else (p["name"][0], "a friend")
    s = a + b + r.randint(5, 30)
    q = c * r.randint(2, 12) + a
    return fmt.format(n=n, m=m, a=a, b=b, c=c, s=s, p=c * r.randint(3, 12), q=q, it=_pick(r, p, "item"))


def _split_templates() -> tuple[dict[str, list[Template]], dict[str, list[Template]]]:
    """Hold out about a fifth of each family's templates (at least one where a family has 3 or more)."""
    train, held = {}, {}
    for fam, templates in FAMILIES.items():
        idx = list(range(len(templates)))
        random.Random(f"{SEED}:tpl:{fam}").shuffle(idx)
        n_held = max(1, round(len(idx) * HELDOUT_FRACTION)) if len(idx) >= 3 else 0
        held[fam] = [templates[i] for i in idx[:n_held]]
        train[fam] = [templates[i] for i in idx[n_held:]]
    held.update(HELDOUT_FAMILIES)
    return train, {k: v for k, v in held.items() if v}


TRAIN_TEMPLATES, HELDOUT_TEMPLATES = _split_templates()


@dataclass(frozen=True)
class Prompt:
    family: str
    text: str


def _decorate(rng: random.Random, fam: str, text: str, split: str) -> str:
    if fam not in DECORATED:
        return text
    prefixes = PREFIXES[:4] + (_PREFIX_TRAIN if split == "train" else _PREFIX_HELD)
    suffixes = SUFFIXES[:5] + (_SUFFIX_TRAIN if split == "train" else _SUFFIX_HELD)
    pre = rng.choice(prefixes)
    suf = rng.choice(suffixes).format(w=rng.choice([30, 50, 80, 100, 150]), s=rng.randint(2, 5))
    if pre.endswith((", ", ": ")) and text[:1].isupper() and not text.startswith(("I ", "I'm", "Python")):
        text = text[0].lower() + text[1:]
    out = pre + text + suf
    if split == "train" and rng.random() < 0.08:  # the casual, lower-case, no-full-stop way some users type
        out = out[0].lower() + out[1:]
        out = out.rstrip(".")
    return out


def _generate(split: str, n: int, weights: dict[str, float] | None = None) -> list[Prompt]:
    templates = TRAIN_TEMPLATES if split == "train" else HELDOUT_TEMPLATES
    pool = pools(split)
    rng = random.Random(f"{SEED}:{split}")
    fams = sorted(templates)
    if weights is None:  # families with more templates get proportionally more prompts, capped
        weights = {f: min(len(templates[f]), 6) for f in fams}
    out: list[Prompt] = []
    seen: set[str] = set()
    tries = 0
    if split == "heldout":  # round robin: every held-out family and template appears
        order = [(f, t) for f in fams for t in templates[f]]
        rng.shuffle(order)
    while len(out) < n:
        tries += 1
        if tries > 200 * n:
            raise RuntimeError(f"could only make {len(out)} unique {split} prompts")
        if split == "heldout":
            fam, tpl = order[(tries - 1) % len(order)]
        else:
            fam = rng.choices(fams, weights=[weights[f] for f in fams])[0]
            tpl = rng.choice(templates[fam])
        text = _decorate(rng, fam, tpl(rng, pool), split)
        if text in seen:
            continue
        seen.add(text)
        out.append(Prompt(fam, text))
    return out


def train_prompts(n: int = 1200) -> list[str]:
    """The training instructions (user messages), in a fixed diverse order."""
    return [p.text for p in _generate("train", n)]


def heldout_prompts(n: int = 48) -> list[str]:
    """Instructions whose templates and topics/contents never occur in ``train_prompts()``."""
    return [p.text for p in _generate("heldout", n)]


def train_families(n: int = 1200) -> list[str]:
    return [p.family for p in _generate("train", n)]


def heldout_families(n: int = 48) -> list[str]:
    return [p.family for p in _generate("heldout", n)]


def self_check(n_train: int = 1200, n_held: int = 48) -> dict:
    """Assert the splits are disjoint in prompts, held-out pool items and templates; return stats."""
    train, held = train_prompts(n_train), heldout_prompts(n_held)
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert not set(train) & set(held)
    leaks = []
    topics_train, topics_held = _SPLIT_POOLS["topic"]
    for prompts, topics, side in ((train, topics_held, "held-out topic in train"),
                                  (held, topics_train, "train topic in held-out")):
        for t in topics:
            pat = topic_pattern(t)
            leaks += [(side, t, p[:60]) for p in prompts if pat.search(p)]
    joined = "\n".join(train).lower()
    for name, (_, held_items) in _SPLIT_POOLS.items():
        if name in _PLAIN_POOLS:
            continue
        leaks += [("held-out item in train", name, _text(it)) for it in held_items if _text(it).lower() in joined]
    assert not leaks, f"{len(leaks)} leaks between the splits: {leaks[:10]}"
    fam_train = {f for f in train_families(n_train)}
    fam_held = {f for f in heldout_families(n_held)}
    return {"train": len(train), "heldout": len(held), "train_families": len(fam_train),
            "heldout_families": len(fam_held), "heldout_only_families": sorted(fam_held - fam_train),
            "train_templates": sum(len(v) for v in TRAIN_TEMPLATES.values()),
            "heldout_templates": sum(len(v) for v in HELDOUT_TEMPLATES.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=["train", "heldout"], default="train")
    ap.add_argument("--show", type=int, default=15, help="print this many prompts of the split")
    args = ap.parse_args()
    prompts = train_prompts() if args.split == "train" else heldout_prompts()
    for p in prompts[: args.show]:
        print("-", p.replace("\n", "\\n")[:200])
    print(self_check())


if __name__ == "__main__":
    main()
