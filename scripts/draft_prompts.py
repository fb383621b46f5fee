"""Self-made chat instructions for distilling the draft model (``train_draft.py``).

The 34 training prompts of ``data/prompts/chat.jsonl`` are far too few to teach a draft how the
target talks, so we combine genre templates with topic lists (English and Chinese, like the chat
set): explanations, advice, stories, poems, letters, tips, comparisons and fun facts. Nothing here
is copied from the held-out split; ``make_prompts`` drops any exact collision with it anyway.
"""

from __future__ import annotations

import random

EN_TOPICS = [
    "rainbows", "tides", "earthquakes", "volcanoes", "thunder and lightning", "the seasons", "gravity",
    "magnets", "electricity", "batteries", "the internet", "email", "solar panels", "wind turbines",
    "recycling", "photosynthesis", "the water cycle", "clouds", "snowflakes", "fossils", "dinosaurs",
    "the human heart", "sleep", "dreams", "memory", "muscles", "bones", "digestion", "allergies",
    "the common cold", "antibiotics", "vitamins", "bees", "ants", "dolphins", "owls", "migrating birds",
    "coral reefs", "rainforests", "deserts", "glaciers", "the moon", "the sun", "stars", "planets",
    "comets", "satellites", "airplanes", "trains", "bicycles", "microwave ovens", "money", "taxes",
    "interest rates", "budgeting", "saving for retirement", "credit scores", "supply and demand",
    "democracy", "libraries", "museums", "maps", "time zones", "calendars", "languages", "music",
    "painting", "photography", "chess", "the Olympic Games", "bread baking", "coffee", "tea",
    "chocolate", "cheese", "composting", "gardening", "houseplants", "friendship", "kindness",
    "procrastination", "stress", "habits", "motivation", "teamwork", "public speaking", "reading",
]
EN_EXPLAIN = [
    "Explain {t} to a ten-year-old in a few sentences.",
    "What should I know about {t}? Keep it simple.",
    "Can you give me a short, clear explanation of {t}?",
    "Why should we care about {t} in everyday life? Answer in one paragraph.",
    "Tell me three interesting facts about {t}.",
    "Write a short paragraph about {t} for a school newsletter.",
    "What is the most common misunderstanding about {t}, and what is actually true?",
    "Explain {t} using an everyday analogy.",
]
EN_SITUATIONS = [
    "I just moved to a new city and I don't know anyone", "my sister and I argue every time we talk about money",
    "I have an exam in two weeks and I haven't started studying", "I want to ask my boss for a raise",
    "my neighbour plays loud music late at night", "I feel tired every afternoon at work",
    "I want to eat healthier but I love snacks", "I keep forgetting to call my grandparents",
    "my team at work missed an important deadline", "I want to save money for a trip next summer",
    "I find it hard to say no when people ask for favours", "I am starting my first job next Monday",
    "my flatmate never does the dishes", "I want to read more books but never find the time",
    "my child does not want to do homework", "I get anxious before flying", "I want to learn to cook",
    "I spend too much time on my phone", "a friend forgot my birthday", "I want to get fitter at home",
    "I have to give a presentation in English", "I feel stuck in my career", "my dog barks at strangers",
    "I am planning a small wedding on a budget", "I want to make new friends as an adult",
    "I have too many meetings and no time to focus", "I want to start a vegetable garden on my balcony",
]
EN_ADVICE = [
    "{s}. What should I do?", "{s}. Any practical tips?", "{s}. How can I handle this calmly?",
    "{s}. Can you suggest a simple plan for the next week?", "Help me: {s}. Give me three ideas.",
]
EN_STORY_SUBJECTS = [
    "a lonely lighthouse", "a dragon who is afraid of heights", "a girl who can talk to trees",
    "an old clockmaker", "a robot learning to paint", "a lost umbrella", "a cat who runs a bakery",
    "two friends on a rainy day", "a snowman who wants to see summer", "a shy turtle",
    "a boy who finds a map in the attic", "a postman on his last day of work", "a moon that stops shining",
    "a library that opens only at night", "a fox and a crow", "a grandmother's secret recipe",
    "a kite that flies too high", "a penguin who wants to fly", "a small village by the sea",
    "a letter that arrives fifty years late", "a violin in a second-hand shop", "a city without colours",
]
EN_STORY = [
    "Write a short story about {s}.", "Write a bedtime story about {s}.",
    "Tell me a fable about {s} and end with the moral.", "Write a 100-word story about {s}.",
    "Write a poem about {s}.", "Write a haiku about {s}.",
]
EN_TASKS = [
    "Write a friendly email to a colleague asking to move our meeting to Thursday.",
    "Write a thank-you note to a teacher who helped me a lot this year.",
    "Write a short message inviting my friends to a picnic on Saturday.",
    "Write a polite complaint to a hotel about a noisy room.",
    "Write a short speech for my best friend's birthday party.",
    "Write a product description for a reusable water bottle.",
    "Give me a simple weekly workout plan for a beginner.",
    "Give me a shopping list for a week of healthy meals.",
    "Plan a one-day trip to a city by the sea.",
    "Suggest five names for a small coffee shop and explain each.",
]
EN_PAIRS = [
    ("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("books", "films"), ("city life", "country life"),
    ("renting", "buying a home"), ("running", "swimming"), ("paper books", "e-books"), ("summer", "winter"),
    ("working from home", "working in an office"), ("saving", "investing"), ("walking", "cycling to work"),
    ("learning alone", "learning in a class"), ("viruses", "bacteria"), ("weather", "climate"),
]
EN_COMPARE = ["What is the difference between {a} and {b}?", "What are the pros and cons of {a} versus {b}?",
              "Compare {a} and {b} in a short list."]
EN_HOW = ["How does a {t} work?", "How is {t} made?", "Explain step by step how a {t} works."]
EN_THINGS = ["refrigerator", "rainbow", "compass", "thermometer", "camera", "light bulb", "microphone",
             "elevator", "bicycle gear", "washing machine", "solar panel", "paper", "glass", "soap",
             "chocolate bar", "pencil", "toothpaste", "smartphone screen", "vaccine", "GPS receiver"]

ZH_TOPICS = [
    "彩虹", "潮汐", "地震", "火山", "打雷和闪电", "四季变化", "万有引力", "磁铁", "电池", "互联网", "太阳能",
    "垃圾分类", "光合作用", "水循环", "云", "雪花", "化石", "恐龙", "心脏", "睡眠", "做梦", "记忆", "过敏",
    "感冒", "维生素", "蜜蜂", "蚂蚁", "海豚", "候鸟迁徙", "珊瑚礁", "热带雨林", "沙漠", "冰川", "月亮",
    "太阳", "星星", "彗星", "人造卫星", "高铁", "自行车", "微波炉", "货币", "利息", "理财", "信用卡",
    "供求关系", "图书馆", "博物馆", "时区", "农历", "书法", "京剧", "围棋", "茶文化", "面包", "咖啡",
    "巧克力", "园艺", "友谊", "拖延症", "压力", "好习惯", "团队合作", "阅读", "音乐", "绘画", "摄影",
]
ZH_EXPLAIN = [
    "请用通俗的语言解释一下{t}。", "什么是{t}？请简单介绍。", "给小学生讲讲{t}是怎么回事。",
    "关于{t}，有哪些有趣的知识？列举三点。", "{t}为什么重要？用一段话回答。", "用一个生活中的比喻解释{t}。",
    "人们对{t}最常见的误解是什么？",
]
ZH_SITUATIONS = [
    "我刚搬到一个新城市，谁也不认识", "我下个月要考试，但是一直静不下心复习", "我想跟老板提加薪",
    "楼上邻居晚上总是很吵", "我每天下午都特别困", "我想吃得健康一点，但是忍不住吃零食",
    "我总是忘记给父母打电话", "我们小组的项目进度落后了", "我想存钱明年去旅行", "我不好意思拒绝别人",
    "下周一我就要开始第一份工作了", "我想多读书但总是没时间", "孩子不愿意写作业", "我一坐飞机就紧张",
    "我想学做饭", "我每天刷手机的时间太长了", "好朋友忘了我的生日", "我想在家里锻炼身体",
    "我要用英语做一次汇报", "我觉得工作没有进步", "我想在阳台上种菜", "我和同事意见总是不一致",
]
ZH_ADVICE = ["{s}，我该怎么办？", "{s}，有什么实用的建议吗？", "{s}。请给我三个建议。",
             "{s}，能帮我制定一个简单的计划吗？"]
ZH_STORY_SUBJECTS = [
    "一座孤独的灯塔", "一条怕高的小龙", "会和树说话的女孩", "老钟表匠", "学画画的机器人", "一把丢失的雨伞",
    "开面包店的猫", "雨天里的两个朋友", "想看夏天的雪人", "害羞的小乌龟", "在阁楼发现地图的男孩",
    "最后一天上班的邮递员", "只在夜里开门的图书馆", "狐狸和乌鸦", "奶奶的秘密菜谱", "飞得太高的风筝",
    "想飞的企鹅", "海边的小村庄", "迟到五十年的信", "二手店里的小提琴",
]
ZH_STORY = ["写一个关于{s}的小故事。", "写一个关于{s}的睡前故事。", "讲一个关于{s}的寓言，最后点明寓意。",
            "写一首关于{s}的短诗。", "以{s}为题写一段一百字左右的短文。"]
ZH_TASKS = [
    "帮我写一封邮件，请同事把会议改到周四。", "写一段感谢老师的话，一百字左右。", "写一条邀请朋友周六去野餐的消息。",
    "帮我写一段好朋友生日聚会上的祝酒词。", "给我一个适合新手的一周健身计划。", "帮我列一个一周健康饮食的购物清单。",
    "帮我规划一次海边城市一日游。", "给一家小咖啡店起五个名字，并说明理由。", "写一段给十年后自己的话。",
]
ZH_PAIRS = [("猫", "狗"), ("茶", "咖啡"), ("高铁", "飞机"), ("读书", "看电影"), ("城市生活", "乡村生活"),
            ("租房", "买房"), ("跑步", "游泳"), ("纸质书", "电子书"), ("夏天", "冬天"), ("在家办公", "去公司上班"),
            ("存钱", "投资"), ("病毒", "细菌")]
ZH_COMPARE = ["{a}和{b}有什么区别？", "{a}和{b}各有什么优缺点？", "请比较一下{a}和{b}。"]


def _expand(templates: list[str], **lists) -> list[str]:
    (key, values), = lists.items()
    return [tpl.format(**{key: v}) for tpl in templates for v in values]


def all_self_made() -> list[str]:
    """Every combination of genre template and topic (a few thousand prompts)."""
    pairs_en = [tpl.format(a=a, b=b) for tpl in EN_COMPARE for a, b in EN_PAIRS]
    pairs_zh = [tpl.format(a=a, b=b) for tpl in ZH_COMPARE for a, b in ZH_PAIRS]
    return (_expand(EN_EXPLAIN, t=EN_TOPICS) + _expand(EN_ADVICE, s=EN_SITUATIONS)
            + _expand(EN_STORY, s=EN_STORY_SUBJECTS) + EN_TASKS + pairs_en + _expand(EN_HOW, t=EN_THINGS)
            + _expand(ZH_EXPLAIN, t=ZH_TOPICS) + _expand(ZH_ADVICE, s=ZH_SITUATIONS)
            + _expand(ZH_STORY, s=ZH_STORY_SUBJECTS) + ZH_TASKS + pairs_zh)


def make_prompts(n: int, seed: int = 0, exclude: tuple[str, ...] = ()) -> list[str]:
    """n distinct self-made prompts, shuffled with ``seed``, none equal to a prompt in ``exclude``."""
    pool = sorted(set(all_self_made()) - set(exclude))
    random.Random(seed).shuffle(pool)
    if n > len(pool):
        raise ValueError(f"n must be <= {len(pool)} (the number of distinct self-made prompts), got {n}")
    return pool[:n]
