"""The small fact tables behind the lookup tasks, shipped with the package.

Each row carries a plausible wrong answer (a common confusion) that simulated workers give when
they err, so that wrong answers look like real mistakes rather than noise.
"""

from __future__ import annotations

# (country, capital (alternatives separated by "|"), common confusion)
CAPITALS: tuple[tuple[str, str, str], ...] = (
    ("Australia", "Canberra", "Sydney"),
    ("Canada", "Ottawa", "Toronto"),
    ("Turkey", "Ankara", "Istanbul"),
    ("Brazil", "Brasília|Brasilia", "Rio de Janeiro"),
    ("Switzerland", "Bern|Berne", "Zurich"),
    ("Nigeria", "Abuja", "Lagos"),
    ("Morocco", "Rabat", "Casablanca"),
    ("New Zealand", "Wellington", "Auckland"),
    ("Vietnam", "Hanoi", "Ho Chi Minh City"),
    ("Pakistan", "Islamabad", "Karachi"),
    ("South Africa", "Pretoria", "Johannesburg"),
    ("India", "New Delhi", "Mumbai"),
    ("China", "Beijing", "Shanghai"),
    ("Japan", "Tokyo", "Kyoto"),
    ("Germany", "Berlin", "Munich"),
    ("Italy", "Rome", "Milan"),
    ("Spain", "Madrid", "Barcelona"),
    ("Portugal", "Lisbon", "Porto"),
    ("Netherlands", "Amsterdam", "The Hague"),
    ("Belgium", "Brussels", "Antwerp"),
    ("Poland", "Warsaw", "Krakow"),
    ("Egypt", "Cairo", "Alexandria"),
    ("Kenya", "Nairobi", "Mombasa"),
    ("Argentina", "Buenos Aires", "Córdoba"),
    ("Chile", "Santiago", "Valparaíso"),
    ("Peru", "Lima", "Cusco"),
    ("Colombia", "Bogotá|Bogota", "Medellín"),
    ("Norway", "Oslo", "Bergen"),
    ("Sweden", "Stockholm", "Gothenburg"),
    ("Finland", "Helsinki", "Tampere"),
    ("Ireland", "Dublin", "Cork"),
    ("Greece", "Athens", "Thessaloniki"),
    ("Ukraine", "Kyiv|Kiev", "Kharkiv"),
    ("Kazakhstan", "Astana", "Almaty"),
    ("Myanmar", "Naypyidaw|Nay Pyi Taw", "Yangon"),
    ("Tanzania", "Dodoma", "Dar es Salaam"),
)

# (element, symbol, common confusion)
ELEMENT_SYMBOLS: tuple[tuple[str, str, str], ...] = (
    ("sodium", "Na", "So"),
    ("potassium", "K", "P"),
    ("iron", "Fe", "Ir"),
    ("silver", "Ag", "Si"),
    ("gold", "Au", "Ag"),
    ("lead", "Pb", "Ld"),
    ("tin", "Sn", "Ti"),
    ("copper", "Cu", "Co"),
    ("mercury", "Hg", "Me"),
    ("tungsten", "W", "Tu"),
    ("antimony", "Sb", "An"),
    ("helium", "He", "H"),
    ("carbon", "C", "Ca"),
    ("nitrogen", "N", "Ni"),
    ("oxygen", "O", "Ox"),
    ("chlorine", "Cl", "C"),
    ("magnesium", "Mg", "Mn"),
    ("manganese", "Mn", "Mg"),
    ("calcium", "Ca", "C"),
    ("zinc", "Zn", "Zi"),
    ("phosphorus", "P", "Ph"),
    ("sulfur", "S", "Su"),
    ("silicon", "Si", "Sn"),
    ("aluminium", "Al", "Am"),
    ("uranium", "U", "Ur"),
    ("neon", "Ne", "N"),
)

# (question, options, index of the correct option)
MULTIPLE_CHOICE: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("Which planet is closest to the Sun?", ("Venus", "Mercury", "Mars", "Earth"), 1),
    (
        "Which planet has the most mass in the Solar System?",
        ("Saturn", "Neptune", "Jupiter", "Earth"),
        2,
    ),
    ("What is the largest ocean on Earth?", ("Atlantic", "Indian", "Arctic", "Pacific"), 3),
    ("How many sides does a hexagon have?", ("Five", "Six", "Seven", "Eight"), 1),
    (
        "Which gas makes up most of Earth's atmosphere?",
        ("Oxygen", "Carbon dioxide", "Nitrogen", "Argon"),
        2,
    ),
    (
        "Who wrote 'Pride and Prejudice'?",
        ("Jane Austen", "Charlotte Brontë", "George Eliot", "Mary Shelley"),
        0,
    ),
    ("What is the hardest natural mineral?", ("Quartz", "Corundum", "Topaz", "Diamond"), 3),
    (
        "What is the boiling point of water at sea level in degrees Celsius?",
        ("90", "100", "110", "212"),
        1,
    ),
    ("Which organ produces insulin?", ("Liver", "Kidney", "Pancreas", "Spleen"), 2),
    (
        "What is the longest river in South America?",
        ("Amazon", "Paraná", "Orinoco", "São Francisco"),
        0,
    ),
    ("How many bits are in a byte?", ("4", "8", "16", "32"), 1),
    ("Which of these is a prime number?", ("21", "27", "29", "33"), 2),
    ("What is the chemical formula of table salt?", ("KCl", "NaCl", "NaOH", "CaCl2"), 1),
    (
        "Which language is primarily spoken in Brazil?",
        ("Spanish", "Portuguese", "French", "Italian"),
        1,
    ),
    (
        "What is the smallest unit of life that can replicate independently?",
        ("Atom", "Molecule", "Cell", "Organ"),
        2,
    ),
    ("In which year did the first person walk on the Moon?", ("1961", "1965", "1969", "1972"), 2),
    ("Which metal is liquid at room temperature?", ("Mercury", "Gallium", "Sodium", "Lead"), 0),
    (
        "What is the speed of light in vacuum, approximately, in km/s?",
        ("30,000", "300,000", "3,000,000", "3,000"),
        1,
    ),
)
