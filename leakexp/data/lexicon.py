"""Developer-written topical lexicon for the toy world.

Real English words (a few with accents, as real queries and documents have), so that Sentence-BERT similarities between toy queries behave like those between real
queries. Each test theme is one line ``title|generalization|reformulation|decoy|topical words``:

- *generalization*: a subset of the title's words (Jansen et al.'s "generalization");
- *reformulation*: the same need with synonymous terms;
- *decoy*: a lexically close query on a different topic (the "Different Topic" label);
- *topical words*: vocabulary of relevant documents, query variants and specializations.

Background themes (``title|topical words``) feed the training pool and the test collections' distractors
and never leak.
"""

TEST_THEMES = """\
lyme disease|lyme|lyme borreliosis infection|lyme regis beach holiday|tick bite rash antibiotics deer fever joint bacteria symptoms diagnosis
hubble telescope|hubble|hubble space observatory|hubble bubble hookah pipe|orbit mirror galaxy images astronomy nasa repair shuttle discoveries lens
ferry sinkings|ferry|passenger ship disasters|ferry terminal parking|capsized drowned passengers baltic estonia overcrowded rescue maritime victims storm
alzheimer drug treatment|alzheimer treatment|dementia medication therapy|alzheimer caregiver grants|memory brain clinical trial patients donepezil cognitive neurons elderly approval
antarctica tourism|antarctica|polar cruise travel|antarctica ice core climate|penguins cruise visitors expedition ships glaciers tourists icebergs environment travel
black bear attacks|bear attacks|grizzly mauling incidents|chicago bears football team|hikers wildlife forest campers park rangers injuries wilderness cubs spray
organic farming|organic|pesticide free agriculture|organic chemistry exam|crops soil farmers fertilizer certification compost yield harvest produce vegetables
airport security|airport|aviation passenger screening|airport parking rates|baggage scanners terrorism passengers checkpoints explosives luggage flights inspection officers
wind power energy|wind power|turbine electricity generation|wind chill temperature|turbines renewable electricity blades farms generation grid offshore megawatt energy
oil spill cleanup|oil spill|petroleum slick remediation|olive oil recipes|tanker crude coast beaches wildlife booms cleanup birds pollution exxon
stolen art recovery|stolen art|missing paintings theft|art gallery opening hours|museum paintings thieves interpol masterpiece recovered auction collectors insurance police
cuba sugar exports|cuba sugar|cuban cane trade|cuba travel beaches|cane harvest havana exports tons economy mills plantation prices trade
el niño weather|el niño|pacific warming phenomenon|el niño restaurant menu|pacific ocean temperature rainfall drought floods climate currents forecast storms
tuberculosis outbreaks|tuberculosis|tb infection epidemics|tuberculosis vaccine history|lungs bacteria cough patients infection hospitals resistant drugs health epidemic
solar car racing|solar car|photovoltaic vehicle competition|solar panel installation|race cells battery vehicle team engineering students sunlight speed design
human smuggling|smuggling|migrant trafficking networks|human anatomy lesson|border migrants smugglers illegal immigrants trafficking police gangs boats victims
poliomyelitis eradication|polio|polio vaccine elimination|polo horse match|vaccine children paralysis immunization campaign virus outbreaks health countries doses
mercy killing|euthanasia|assisted suicide debate|mercy hospital visiting|doctors patients terminal illness death law dignity legal physicians court
gasoline tax increase|gas tax|fuel levy hike|gas station coupons|fuel prices gallon highway revenue congress motorists pump taxes legislation
deforestation in brazil|deforestation|amazon forest clearing|brazil football team|amazon rainforest logging trees cattle ranchers burning species acres government
child labor laws|child labor|underage worker rules|labor day sales|children factories workers employment hours wages exploitation regulations industry minors
space station construction|space station|orbital laboratory assembly|station wagon cars|astronauts modules orbit nasa shuttle assembly russia crew launch laboratory
counterfeit currency|counterfeit money|fake banknotes|currency exchange rates|bills printing dollars forgery secret service notes criminals detection treasury
heart transplants|heart transplant|cardiac organ replacement|heart shaped cake|surgery donor organs patients surgeons rejection hospital recipients cardiac survival
hydroponics|hydroponic gardening|soilless plant growing|hydro electric dams|plants nutrients water growing greenhouse solution roots lettuce systems indoor
nuclear waste storage|nuclear waste|radioactive waste disposal|nuclear family structure|radioactive storage plants repository disposal barrels uranium site reactor containers
legionnaires disease|legionnaires|legionella outbreak|foreign legion recruitment|bacteria pneumonia outbreak water cooling towers hotel infection patients health symptoms
drug legalization|legalization|narcotics decriminalization|drug store hours|marijuana cocaine users law crime addicts policy prohibition legal treatment
school prayer|prayer|religion in public schools|school lunch menu|students court religious amendment church teachers constitution public ruling prayers
obesity in children|obesity|childhood overweight|obesity surgery costs|children weight diet exercise calories health fat food schools parents
iran nuclear program|iran nuclear|iranian atomic ambitions|iran travel guide|uranium enrichment sanctions weapons inspectors tehran reactor centrifuges talks program
wildfire prevention|wildfire|forest fire control|wildfire band concert|forest blaze firefighters drought brush acres evacuation smoke flames prevention
elephant poaching|poaching|ivory hunting|poached egg recipe|elephants ivory tusks hunters africa wildlife rangers trade conservation herd
ocean acidification|acidification|sea water acidity|ocean city boardwalk|carbon dioxide oceans coral reefs shells marine ph water chemistry species
bee colony collapse|bee colony|honeybee die off|spelling bee contest|bees hives honey beekeepers pesticides pollination colonies queen crops decline
cyber attacks banks|cyber attacks|hacking financial institutions|bank holiday dates|hackers computers banks networks security breach data fraud systems online
"""

BACKGROUND_THEMES = """\
chocolate cake recipe|baking flour sugar cocoa oven eggs butter frosting dessert kitchen
marathon training|running miles race pace shoes runners endurance stretching coach schedule
guitar lessons|chords strings music practice songs frets beginner acoustic tuning players
python programming|code software functions variables language developers loops scripts library errors
wedding planning|bride venue guests dress flowers ceremony reception budget invitations photographer
dog grooming|puppy fur brushing bath nails breeds pets shampoo groomers coat
mortgage rates|loan interest homebuyers bank payments refinance lenders credit housing percent
coffee brewing|beans espresso grind roast water cups filter barista caffeine aroma
car insurance quotes|drivers premiums policy accident coverage vehicle claims rates company deductible
knitting patterns|yarn needles stitches wool scarf sweater crochet knit beginner craft
volcano eruptions|lava magma ash crater eruption mountain seismic lava flows geology
chess openings|board pieces moves strategy players pawn king queen tournament grandmaster
tax refund status|irs returns filing refund income deductions forms taxpayers credit check
yoga poses|stretching breathing mat meditation flexibility balance poses instructor practice calm
smartphone batteries|phone charging battery screen apps lithium charger power device hours
roman empire history|rome emperors legions senate caesar conquest ancient history republic provinces
pizza dough|yeast flour oven cheese tomato crust dough bake toppings slices
home gardening tips|garden seeds soil watering plants flowers tomatoes weeds mulch beds
jazz musicians|saxophone trumpet improvisation clubs albums swing bands records bebop musicians
credit card fraud|cards charges stolen identity banks statements merchants unauthorized fraud transactions
solar system planets|jupiter mars saturn orbit planets moons sun gravity astronomy earth
tennis grand slam|players rackets serve matches wimbledon court tournament champion sets tennis
sleep apnea|snoring breathing sleep airway machine night tired doctors mask oxygen
electric guitars|amplifiers pickups distortion strings fender rock solo pedals electric sound
ancient egypt pyramids|pharaoh tombs nile pyramids mummies desert egyptians kings temples archaeology
wine tasting|grapes vineyard red white bottle tasting cellar vintage aroma winery
ski resorts|snow slopes lifts skiing mountains lodge powder trails winter resort
diabetes diet|blood sugar insulin glucose carbs meals diet diabetics levels fiber
photography lighting|camera flash exposure shutter lens portrait studio photos aperture light
bitcoin mining|cryptocurrency blockchain miners coins wallet computers electricity network bitcoin price
kitchen renovation|cabinets countertops sink tiles appliances remodel contractor design kitchen cost
migraine headaches|pain headache aura nausea light triggers medication migraine relief attacks
birdwatching|birds binoculars species feathers nests migration songbirds watchers field guide
resume writing|resume jobs skills employers interview experience applicants cover letter career
vegan recipes|vegetables tofu beans lentils plant meals vegan protein dishes cooking
basketball playoffs|teams points players finals court coach league season scoring basketball
sourdough bread|starter flour loaf bread fermentation crust baking dough yeast rye
first aid training|bandages wounds cpr emergency injuries burns kit responders bleeding safety
video game consoles|games controller console players graphics xbox playstation nintendo gaming screen
hiking boots|boots trails hiking waterproof socks blisters ankle soles trekking outdoor
café crème recipes|café crème brûlée pâtisserie croissant espresso bistro soufflé purée flambé
"""
