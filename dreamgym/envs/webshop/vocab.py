"""The generated WebShop catalog's vocabulary: product types, category paths, attributes, options, brands.

Owns: the static word lists the catalog generator draws from and that the goal parser and the type reward
use to recognise product types, attributes, option values and title nouns.
Must not know: products, pages, the search engine, the environment.

The five top-level categories follow the original WebShop scrape (beauty, food, fashion, furniture/home,
electronics). Each product type carries its own attribute pool and option groups so that instructions
read like the originals ("i need a long clip-in hair extension which is natural looking ...").
Everything here is lower case except display names, because WebShop instructions are lower case.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- option value pools -------------------------------------------------------------------------------
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
BED_SIZES = ("twin", "twin xl", "full", "queen", "king", "california king")
COLORS = ("black", "white", "navy", "grey", "red", "blue", "green", "pink", "purple", "beige", "brown",
          "khaki", "olive", "burgundy", "yellow", "orange", "teal", "charcoal", "ivory", "light blue",
          "dark green", "rose gold", "silver", "gold", "coral", "lavender", "mint", "turquoise")
HAIR_COLORS = ("natural black", "jet black", "dark brown", "medium brown", "light brown", "honey blonde",
               "platinum blonde", "auburn", "ombre brown", "burgundy")
LIP_SHADES = ("nude", "berry", "classic red", "coral", "mauve", "pink", "plum", "rose", "brick red", "peach")
WOOD_COLORS = ("walnut", "oak", "espresso", "rustic brown", "white", "black", "grey wash", "natural")
SCENTS = ("lavender", "coconut", "unscented", "fresh citrus", "eucalyptus mint", "vanilla", "rose",
          "tea tree", "ocean breeze", "sandalwood")
SNACK_FLAVORS = ("chocolate chip", "peanut butter", "sea salt", "cookies and cream", "vanilla almond",
                 "salted caramel", "blueberry", "cinnamon", "birthday cake", "mint chocolate")
CHIP_FLAVORS = ("sea salt", "sour cream and onion", "barbecue", "salt and vinegar", "jalapeno",
                "cheddar", "original", "honey mustard")
COFFEE_ROASTS = ("light roast", "medium roast", "dark roast", "espresso roast", "french roast",
                 "breakfast blend", "hazelnut", "decaf")
TEA_FLAVORS = ("jasmine", "mint", "lemon ginger", "matcha", "peach", "original", "honey", "chai")
JERKY_FLAVORS = ("original", "teriyaki", "peppered", "sweet and hot", "hickory smoked", "spicy")
WATER_FLAVORS = ("lime", "lemon", "grapefruit", "black cherry", "raspberry", "mango", "unflavored")
NUT_FLAVORS = ("lightly salted", "unsalted", "honey roasted", "smoked", "sea salt", "cinnamon")
SAUCE_FLAVORS = ("original", "habanero", "garlic", "chipotle", "sriracha", "ghost pepper")
CHOCOLATE_FLAVORS = ("sea salt", "almond", "orange", "mint", "raspberry", "espresso", "coconut")
COUNTS = ("pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12", "pack of 24")
BAR_COUNTS = ("12 count", "15 count", "20 count", "24 count", "30 count")
LIQUID_SIZES = ("8 fl oz", "12 fl oz", "16 fl oz", "25.4 fl oz", "33.8 fl oz")
CREAM_SIZES = ("1 fl oz", "1.7 fl oz", "2.5 fl oz", "3.4 fl oz")
WEIGHT_SIZES = ("8 ounce", "12 ounce", "16 ounce", "24 ounce", "2 pound", "5 pound")
HAIR_LENGTHS = ("12 inch", "14 inch", "16 inch", "18 inch", "20 inch", "22 inch", "24 inch")
PAN_SIZES = ("8 inch", "10 inch", "12 inch", "14 inch")
PILLOW_SIZES = ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch", "22 x 22 inch", "24 x 24 inch")
CURTAIN_SIZES = ("42 x 63 inch", "52 x 63 inch", "52 x 84 inch", "52 x 95 inch", "52 x 108 inch")
TOWEL_SETS = ("set of 2", "set of 4", "set of 6", "set of 8")
CABLE_LENGTHS = ("1 ft", "3 ft", "6 ft", "10 ft", "15 ft")
CAPACITIES = ("32gb", "64gb", "128gb", "256gb", "512gb")
BATTERY_SIZES = ("5000mah", "10000mah", "20000mah", "26800mah")
TV_SIZES = ("26-55 inch", "32-65 inch", "37-70 inch", "42-85 inch")
PHONE_MODELS = ("iphone 13", "iphone 14", "iphone 14 pro", "iphone 15", "galaxy s23", "pixel 8")
BAND_SIZES = ("38mm", "40mm", "41mm", "44mm", "45mm", "49mm")
SWITCH_TYPES = ("blue switch", "brown switch", "red switch", "silent switch")

# Generic attributes any product may also carry (as in the original, many products list these).
GENERIC_ATTRIBUTES = ("high quality", "easy to use", "easy clean", "long lasting", "lightweight",
                      "durable", "travel size", "gift set")


@dataclass(frozen=True)
class ProductType:
    """One kind of product: how it is named, where it lives in the category tree and what it can offer."""

    name: str                       # the phrase instructions use, e.g. "men's t-shirt"
    query: str                      # the original's `query` field (the search query that found it)
    category: str                   # top-level category: beauty | food | fashion | furniture | electronics
    path: tuple[str, ...]           # category path, joined with " › "
    display: str                    # the type as it appears in titles, e.g. "Men's T-Shirt"
    nouns: tuple[str, ...]          # title nouns of this type (the type reward's noun vocabulary)
    attributes: tuple[str, ...]     # attribute pool
    options: tuple[tuple[str, tuple[str, ...]], ...]  # option groups: (name, value pool)
    price: tuple[float, float]      # price range in dollars
    materials: tuple[str, ...] = ()  # title words that are nouns too (cotton, leather, ...)


def _t(name, query, category, path, display, nouns, attributes, options, price, materials=()):
    return ProductType(name, query, category, tuple(path.split(" > ")), display, tuple(nouns),
                       tuple(attributes), tuple(options), price, tuple(materials))


FASHION = "Clothing, Shoes & Jewelry"
BEAUTY = "Beauty & Personal Care"
FOOD = "Grocery & Gourmet Food"
HOME = "Home & Kitchen"
ELEC = "Electronics"
PHONE = "Cell Phones & Accessories"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # fashion
    _t("men's t-shirt", "men's t-shirts", "fashion", f"{FASHION} > Men > Clothing > Shirts > T-Shirts",
       "Men's T-Shirt", ("t-shirt", "shirt", "tee"),
       ("machine wash", "long sleeve", "short sleeve", "cotton spandex", "slim fit", "classic fit",
        "moisture wicking", "relaxed fit", "crew neck", "button closure"),
       (("size", APPAREL_SIZES), ("color", COLORS)), (8, 45), ("cotton", "jersey")),
    _t("women's dress", "women's dresses", "fashion", f"{FASHION} > Women > Clothing > Dresses",
       "Women's Dress", ("dress",),
       ("machine wash", "hand wash", "long sleeve", "short sleeve", "elastic waist", "daily wear",
        "soft material", "polyester spandex", "v neck", "knee length"),
       (("size", APPAREL_SIZES), ("color", COLORS)), (18, 70), ("chiffon", "lace")),
    _t("hoodie", "hoodies for men", "fashion",
       f"{FASHION} > Men > Clothing > Fashion Hoodies & Sweatshirts", "Pullover Hoodie",
       ("hoodie", "sweatshirt", "pullover"),
       ("machine wash", "long sleeve", "fleece lined", "drawstring closure", "relaxed fit",
        "cotton polyester", "kangaroo pocket", "winter warm"),
       (("size", APPAREL_SIZES), ("color", COLORS)), (20, 65), ("fleece",)),
    _t("women's jeans", "women's jeans", "fashion", f"{FASHION} > Women > Clothing > Jeans",
       "Women's Jeans", ("jeans", "denim"),
       ("machine wash", "slim fit", "high waist", "stretch fabric", "button closure", "straight leg",
        "skinny fit", "butt lifting"),
       (("size", APPAREL_SIZES), ("color", ("light blue", "dark blue", "black", "grey", "white",
                                            "medium wash", "stone wash"))), (22, 80), ("denim",)),
    _t("running shoes", "men's running shoes", "fashion",
       f"{FASHION} > Men > Shoes > Athletic > Running", "Men's Running Shoes", ("shoes", "sneakers"),
       ("non slip", "rubber sole", "lace up", "memory foam", "arch support", "breathable mesh",
        "lightweight", "shock absorption"),
       (("size", SHOE_SIZES), ("color", COLORS)), (30, 120), ("mesh",)),
    _t("women's sandals", "women's sandals", "fashion", f"{FASHION} > Women > Shoes > Sandals",
       "Women's Sandals", ("sandals", "slides"),
       ("non slip", "open toe", "ankle strap", "rubber sole", "comfortable fit", "memory foam",
        "arch support", "leather sole"),
       (("size", SHOE_SIZES), ("color", COLORS)), (15, 70), ("leather",)),
    _t("athletic socks", "men's athletic socks", "fashion", f"{FASHION} > Men > Clothing > Socks",
       "Athletic Crew Socks", ("socks",),
       ("moisture wicking", "cushioned sole", "machine wash", "breathable", "arch support",
        "ankle length", "anti blister"),
       (("size", ("small", "medium", "large", "x-large")), ("color", COLORS)), (8, 30), ("cotton",)),
    _t("yoga leggings", "women's yoga leggings", "fashion",
       f"{FASHION} > Women > Clothing > Active > Leggings", "Women's Yoga Leggings", ("leggings", "pants"),
       ("high waist", "tummy control", "moisture wicking", "four way stretch", "machine wash",
        "squat proof", "side pockets"),
       (("size", APPAREL_SIZES), ("color", COLORS)), (15, 55), ("nylon",)),
    _t("baseball cap", "baseball caps", "fashion",
       f"{FASHION} > Men > Accessories > Hats & Caps > Baseball Caps", "Baseball Cap", ("cap", "hat"),
       ("adjustable strap", "breathable", "sun protection", "quick dry", "unisex adult", "washed cotton"),
       (("color", COLORS),), (8, 32), ("cotton",)),
    _t("winter gloves", "winter gloves", "fashion",
       f"{FASHION} > Women > Accessories > Gloves & Mittens", "Winter Gloves", ("gloves",),
       ("touch screen", "winter warm", "fleece lined", "water resistant", "non slip", "elastic cuff"),
       (("size", ("small", "medium", "large", "x-large")), ("color", COLORS)), (9, 40), ("wool",)),
    # beauty
    _t("shampoo", "sulfate free shampoo", "beauty",
       f"{BEAUTY} > Hair Care > Shampoo & Conditioner > Shampoos", "Shampoo", ("shampoo",),
       ("sulfate free", "paraben free", "natural ingredients", "dry hair", "hair growth", "cruelty free",
        "color treated", "argan oil"),
       (("scent", SCENTS), ("size", LIQUID_SIZES)), (7, 40), ()),
    _t("hair extension", "clip in hair extensions", "beauty",
       f"{BEAUTY} > Hair Care > Hair Extensions, Wigs & Accessories > Hair Extensions",
       "Clip-In Hair Extension", ("extension", "extensions", "hair"),
       ("natural looking", "clip in", "human hair", "heat resistant", "easy apply", "long lasting",
        "high quality", "double weft"),
       (("color", HAIR_COLORS), ("size", HAIR_LENGTHS)), (15, 120), ()),
    _t("lipstick", "matte lipstick", "beauty", f"{BEAUTY} > Makeup > Lips > Lipstick", "Matte Lipstick",
       ("lipstick", "lip"),
       ("long lasting", "cruelty free", "moisturizing", "matte finish", "waterproof", "paraben free",
        "highly pigmented"),
       (("color", LIP_SHADES), ("size", COUNTS[:4])), (5, 30), ()),
    _t("face moisturizer", "face moisturizer", "beauty", f"{BEAUTY} > Skin Care > Face > Moisturizers",
       "Face Moisturizer", ("moisturizer", "cream"),
       ("dry skin", "sensitive skin", "hyaluronic acid", "fragrance free", "anti aging", "oil free",
        "non greasy", "fine lines"),
       (("size", CREAM_SIZES),), (9, 60), ()),
    _t("nail polish", "nail polish set", "beauty", f"{BEAUTY} > Makeup > Nails > Nail Polish",
       "Nail Polish", ("polish", "nail"),
       ("long lasting", "quick dry", "non toxic", "high gloss", "easy use", "gel like", "chip resistant"),
       (("color", COLORS), ("size", COUNTS[:4])), (5, 28), ()),
    _t("deodorant", "natural deodorant", "beauty",
       f"{BEAUTY} > Personal Care > Deodorants & Antiperspirants > Deodorants", "Natural Deodorant",
       ("deodorant",),
       ("aluminum free", "long lasting", "natural ingredients", "sensitive skin", "cruelty free",
        "baking soda free", "vegan formula"),
       (("scent", SCENTS), ("size", COUNTS[:5])), (6, 30), ()),
    _t("electric toothbrush", "electric toothbrush", "beauty",
       f"{BEAUTY} > Oral Care > Toothbrushes & Accessories > Electric Toothbrushes",
       "Electric Toothbrush", ("toothbrush",),
       ("rechargeable", "long battery life", "travel case", "gentle cleaning", "smart timer",
        "replacement heads"),
       (("color", COLORS[:12]),), (20, 110), ()),
    _t("hair dryer", "ionic hair dryer", "beauty",
       f"{BEAUTY} > Hair Care > Styling Tools & Appliances > Hair Dryers", "Ionic Hair Dryer",
       ("dryer", "blow dryer"),
       ("ionic technology", "low noise", "fast drying", "travel size", "diffuser attachment",
        "cool shot", "lightweight"),
       (("color", COLORS[:14]),), (18, 90), ()),
    _t("makeup brush set", "makeup brush set", "beauty",
       f"{BEAUTY} > Tools & Accessories > Makeup Brushes & Tools > Brush Sets", "Makeup Brush Set",
       ("brush", "brushes", "set"),
       ("synthetic bristles", "cruelty free", "easy clean", "travel case", "soft bristles", "eye shadow"),
       (("color", COLORS[:16]), ("size", ("5 pieces", "10 pieces", "14 pieces", "18 pieces"))),
       (6, 40), ()),
    _t("perfume", "women's perfume", "beauty",
       f"{BEAUTY} > Fragrance > Women's > Eau de Parfum", "Eau de Parfum", ("perfume", "parfum"),
       ("long lasting", "fresh scent", "travel size", "floral notes", "gift set", "vegan formula"),
       (("scent", SCENTS), ("size", CREAM_SIZES)), (15, 120), ()),
    # food
    _t("protein bars", "protein bars", "food", f"{FOOD} > Snack Foods > Bars > Protein Bars",
       "Protein Bars", ("bars", "bar"),
       ("gluten free", "high protein", "low sugar", "non gmo", "keto friendly", "plant based",
        "individually wrapped"),
       (("flavor", SNACK_FLAVORS), ("size", BAR_COUNTS)), (12, 45), ()),
    _t("ground coffee", "ground coffee", "food", f"{FOOD} > Beverages > Coffee, Tea & Cocoa > Ground Coffee",
       "Ground Coffee", ("coffee",),
       ("fair trade", "organic", "low acid", "single origin", "gluten free", "rich flavor",
        "resealable bag"),
       (("flavor", COFFEE_ROASTS), ("size", WEIGHT_SIZES)), (8, 40), ()),
    _t("green tea", "green tea bags", "food", f"{FOOD} > Beverages > Coffee, Tea & Cocoa > Tea > Green Tea",
       "Green Tea Bags", ("tea", "bags"),
       ("caffeine free", "organic", "non gmo", "individually wrapped", "natural ingredients",
        "kosher certified"),
       (("flavor", TEA_FLAVORS), ("size", COUNTS)), (5, 30), ()),
    _t("potato chips", "kettle potato chips", "food",
       f"{FOOD} > Snack Foods > Chips & Crisps > Potato Chips", "Kettle Potato Chips", ("chips",),
       ("gluten free", "kettle cooked", "non gmo", "low sodium", "individually wrapped", "vegan",
        "no artificial"),
       (("flavor", CHIP_FLAVORS), ("size", COUNTS)), (6, 35), ()),
    _t("olive oil", "extra virgin olive oil", "food",
       f"{FOOD} > Pantry Staples > Cooking & Baking > Oils > Olive Oil", "Olive Oil", ("oil",),
       ("extra virgin", "cold pressed", "organic", "non gmo", "first cold", "glass bottle"),
       (("size", LIQUID_SIZES),), (9, 45), ()),
    _t("dark chocolate", "dark chocolate bars", "food",
       f"{FOOD} > Candy & Chocolate > Chocolate > Chocolate Bars", "Dark Chocolate Bar",
       ("chocolate", "bar"),
       ("low sugar", "dairy free", "fair trade", "keto friendly", "individually wrapped",
        "gluten free", "valentine day"),
       (("flavor", CHOCOLATE_FLAVORS), ("size", COUNTS)), (5, 35), ()),
    _t("beef jerky", "beef jerky", "food", f"{FOOD} > Meat & Seafood > Jerky & Dried Meats > Beef Jerky",
       "Beef Jerky", ("jerky", "beef"),
       ("high protein", "gluten free", "low fat", "ready eat", "no artificial", "grass fed"),
       (("flavor", JERKY_FLAVORS), ("size", WEIGHT_SIZES[:4])), (7, 40), ()),
    _t("mixed nuts", "mixed nuts", "food", f"{FOOD} > Snack Foods > Nuts & Seeds > Mixed Nuts",
       "Mixed Nuts", ("nuts",),
       ("gluten free", "non gmo", "high protein", "resealable bag", "dry roasted", "kosher certified"),
       (("flavor", NUT_FLAVORS), ("size", WEIGHT_SIZES)), (7, 35), ()),
    _t("hot sauce", "hot sauce", "food", f"{FOOD} > Condiments & Salad Dressings > Hot Sauce",
       "Hot Sauce", ("sauce",),
       ("gluten free", "sugar free", "non gmo", "vegan", "small batch", "low calorie"),
       (("flavor", SAUCE_FLAVORS), ("size", COUNTS[:5])), (5, 25), ()),
    _t("sparkling water", "sparkling water", "food", f"{FOOD} > Beverages > Bottled Beverages > Sparkling Water",
       "Sparkling Water", ("water",),
       ("zero calorie", "sugar free", "natural flavors", "bpa free", "caffeine free", "non gmo"),
       (("flavor", WATER_FLAVORS), ("size", COUNTS)), (6, 30), ()),
    # furniture / home
    _t("bed sheet set", "queen bed sheets", "furniture",
       f"{HOME} > Bedding > Sheets & Pillowcases > Sheet & Pillowcase Sets", "Bed Sheet Set",
       ("sheet", "sheets", "set"),
       ("machine wash", "deep pocket", "wrinkle free", "breathable", "easy care", "soft microfiber",
        "fade resistant"),
       (("size", BED_SIZES), ("color", COLORS)), (18, 90), ("microfiber", "cotton")),
    _t("office chair", "ergonomic office chair", "furniture",
       f"{HOME} > Furniture > Home Office Furniture > Home Office Chairs", "Ergonomic Office Chair",
       ("chair",),
       ("lumbar support", "height adjustable", "easy assembly", "high back", "mesh back", "heavy duty",
        "swivel wheels"),
       (("color", COLORS[:10]),), (60, 280), ("mesh",)),
    _t("coffee table", "coffee table for living room", "furniture",
       f"{HOME} > Furniture > Living Room Furniture > Tables > Coffee Tables", "Coffee Table",
       ("table",),
       ("easy assembly", "storage space", "solid wood", "mid century", "space saving", "living room",
        "metal frame"),
       (("color", WOOD_COLORS),), (50, 260), ("wood",)),
    _t("throw pillow covers", "throw pillow covers", "furniture",
       f"{HOME} > Home Decor Products > Decorative Pillows, Inserts & Covers > Throw Pillow Covers",
       "Throw Pillow Covers", ("covers", "pillow", "cases"),
       ("machine wash", "zipper closure", "double sided", "soft fabric", "living room", "farmhouse style"),
       (("size", PILLOW_SIZES), ("color", COLORS)), (8, 35), ("velvet", "linen")),
    _t("blackout curtains", "blackout curtains", "furniture",
       f"{HOME} > Home Decor Products > Window Treatments > Curtains & Drapes > Panels",
       "Blackout Curtains", ("curtains", "panels"),
       ("thermal insulated", "machine wash", "energy saving", "easy install", "noise reducing",
        "living room", "grommet top"),
       (("size", CURTAIN_SIZES), ("color", COLORS)), (15, 70), ()),
    _t("bath towels", "bath towel set", "furniture", f"{HOME} > Bath > Towels > Bath Towels",
       "Bath Towel Set", ("towels", "towel"),
       ("quick dry", "highly absorbent", "machine wash", "soft touch", "hotel quality", "lint free"),
       (("size", TOWEL_SETS), ("color", COLORS)), (15, 65), ("cotton",)),
    _t("shoe rack", "shoe rack organizer", "furniture",
       f"{HOME} > Storage & Organization > Clothing & Closet Storage > Shoe Organizers", "Shoe Rack",
       ("rack", "organizer"),
       ("easy assembly", "space saving", "heavy duty", "stainless steel", "living room", "stackable"),
       (("color", ("black", "white", "bronze", "silver", "brown", "grey")),
        ("size", ("3 tier", "4 tier", "5 tier", "6 tier"))), (18, 70), ("steel",)),
    _t("table lamp", "bedside table lamp", "furniture",
       f"{HOME} > Lighting & Ceiling Fans > Lamps & Shades > Table Lamps", "Table Lamp", ("lamp",),
       ("usb port", "dimmable", "touch control", "energy saving", "living room", "bedside lamp",
        "glass shade"),
       (("color", COLORS[:12]),), (18, 90), ()),
    _t("bookshelf", "bookshelf for living room", "furniture",
       f"{HOME} > Furniture > Living Room Furniture > Bookcases", "Bookshelf", ("bookshelf", "bookcase"),
       ("easy assembly", "storage space", "engineered wood", "living room", "industrial style",
        "metal frame"),
       (("color", WOOD_COLORS), ("size", ("3 tier", "4 tier", "5 tier"))), (40, 200), ("wood",)),
    _t("frying pan", "non stick frying pan", "furniture",
       f"{HOME} > Kitchen & Dining > Cookware > Pots & Pans > Skillets", "Nonstick Frying Pan",
       ("pan", "skillet"),
       ("non stick", "dishwasher safe", "oven safe", "induction compatible", "heat resistant",
        "stay cool handle"),
       (("size", PAN_SIZES), ("color", ("black", "grey", "red", "blue", "green", "cream"))), (15, 80), ()),
    # electronics
    _t("bluetooth headphones", "noise cancelling headphones", "electronics",
       f"{ELEC} > Headphones, Earbuds & Accessories > Headphones > Over-Ear Headphones",
       "Over-Ear Bluetooth Headphones", ("headphones", "headset"),
       ("noise cancelling", "wireless bluetooth", "long battery life", "built microphone",
        "hands free", "fast charging", "foldable design"),
       (("color", COLORS[:12]),), (25, 200), ()),
    _t("wireless earbuds", "wireless earbuds", "electronics",
       f"{ELEC} > Headphones, Earbuds & Accessories > Earbuds & In-Ear Headphones", "Wireless Earbuds",
       ("earbuds", "earphones"),
       ("noise cancelling", "water resistant", "charging case", "touch control", "long battery life",
        "hands free", "wireless charging"),
       (("color", COLORS[:12]),), (18, 150), ()),
    _t("phone case", "iphone case", "electronics",
       f"{PHONE} > Cases, Holsters & Sleeves > Basic Cases", "Phone Case", ("case", "cover"),
       ("shock absorbing", "wireless charging", "scratch resistant", "easy install", "slim design",
        "drop protection", "raised edges"),
       (("size", PHONE_MODELS), ("color", COLORS)), (6, 35), ("silicone",)),
    _t("usb c cable", "usb c charging cable", "electronics",
       f"{ELEC} > Computers & Accessories > Computer Cables & Connectors > USB Cables", "USB C Cable",
       ("cable", "charger"),
       ("fast charging", "high speed", "braided nylon", "durable", "data transfer", "usb type"),
       (("size", CABLE_LENGTHS), ("color", COLORS[:10])), (6, 25), ("nylon",)),
    _t("power bank", "portable charger power bank", "electronics",
       f"{PHONE} > Chargers & Power Adapters > Portable Power Banks", "Portable Power Bank",
       ("bank", "charger", "battery"),
       ("fast charging", "usb c", "led display", "high capacity", "dual output", "compact size"),
       (("size", BATTERY_SIZES), ("color", COLORS[:8])), (15, 70), ()),
    _t("tv wall mount", "tv wall mount", "electronics",
       f"{ELEC} > Television & Video > Accessories > TV Mounts, Stands & Turntables > TV Wall Mounts",
       "TV Wall Mount", ("mount", "bracket"),
       ("heavy duty", "easy install", "full motion", "tilt swivel", "cable management", "wall mounted"),
       (("size", TV_SIZES),), (18, 90), ("steel",)),
    _t("bluetooth speaker", "portable bluetooth speaker", "electronics",
       f"{ELEC} > Portable Audio & Video > Portable Bluetooth Speakers", "Portable Bluetooth Speaker",
       ("speaker",),
       ("waterproof", "long battery life", "wireless bluetooth", "stereo sound", "built microphone",
        "outdoor use"),
       (("color", COLORS[:12]),), (20, 160), ()),
    _t("wireless keyboard", "wireless keyboard", "electronics",
       f"{ELEC} > Computers & Accessories > Computer Accessories & Peripherals > Keyboards",
       "Wireless Keyboard", ("keyboard",),
       ("wireless bluetooth", "rechargeable", "quiet keys", "backlit", "ergonomic design",
        "multi device"),
       (("color", COLORS[:8]), ("style", SWITCH_TYPES)), (20, 130), ()),
    _t("memory card", "micro sd card", "electronics",
       f"{ELEC} > Computers & Accessories > Data Storage > Memory Cards > Micro SD Cards", "Micro SD Card",
       ("card", "memory"),
       ("high speed", "water resistant", "video recording", "durable", "sd adapter"),
       (("size", CAPACITIES), ("style", COUNTS[:3])), (7, 60), ()),
    _t("smart watch band", "apple watch band", "electronics",
       f"{ELEC} > Wearable Technology > Accessories > Bands", "Smart Watch Band", ("band", "strap"),
       ("quick release", "water resistant", "adjustable strap", "soft silicone", "stainless steel",
        "sport band"),
       (("size", BAND_SIZES), ("color", COLORS)), (7, 40), ("silicone",)),
)

BRANDS = ("Hanes", "Amazon Essentials", "Gildan", "Nautica", "Urban Peak", "Northway", "Bluefin",
          "Maple & Pine", "Solstice", "Evergreen", "Ridgeline", "Kirra", "Lumen", "Oakhurst", "Vantage",
          "Halcyon", "Brightwater", "Copperleaf", "Driftwood", "Everfresh", "Fieldstone", "Goldcrest",
          "Harborview", "Ironwood", "Juniper", "Kestrel", "Larkspur", "Meridian", "Nimbus", "Orchid Lane",
          "Pinecrest", "Quillon", "Redwood", "Sagebrush", "Tidewater", "Umbra", "Verity", "Willow & Co",
          "Yarrow", "Zephyr", "Aurora", "Bramble", "Cascade", "Dovetail", "Ember", "Foxglove", "Glacier",
          "Heron", "Indigo Bay", "Jasper")

# Words that appear in instructions but carry no goal content (the parser's notion of "well-formed").
TEMPLATE_WORDS = frozenset("""
i i'm im am looking for need want would like to buy find me get please can you help show searching search
a an some the that is which are with in and, and or of it its should be has have having also color colour
colored size sized flavor flavored flavour scent scented style price lower than less under below dollars
dollar costs cost priced pricing at most no more not over within budget my for a also pair set one ones
hey hi there looking something item product products good nice shopping order purchase go let's lets get
want'd i'd is the comes come made available kind type
""".split())
